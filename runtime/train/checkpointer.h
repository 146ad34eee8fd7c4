// Checkpoints written in the background, so saving does not stall training:
//
//   auto ckpt = Checkpointer::Create({.dir = "run1/checkpoints", .keep = 3});
//   ... every K steps:  RETURN_IF_ERROR((*ckpt)->Save(*session, step));
//   ... at the end:     RETURN_IF_ERROR((*ckpt)->Flush());
//   ... after a crash:  auto step = Checkpointer::RestoreNewest(*session, "run1/checkpoints");
//
// Save takes the session's variables (Session::SnapshotVariables: references, not copies) and
// returns; a background thread writes them to DIR/ckpt-STEP.dfckpt, atomically (a file is
// either whole or absent; synced as CheckpointerOptions::sync_every says, the newest synced one
// named in DIR/.synced with the machine's boot), then deletes all but the newest `keep`: the next
// older one is kept under a spare name (DIR/.spare-PID-N.tmp, never read) and overwritten by the
// next checkpoint, which costs the kernel a third of the time of a new file. The spare is removed
// with the Checkpointer (and, if its process died, by the next Checkpointer::Create on DIR). A
// snapshot that waits while the writer is busy is replaced by a newer one: the newest always wins,
// and memory holds at most two snapshots. A write's error stops further writes and is returned by
// the next Save or Flush.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "graph/mutex.h"
#include "graph/thread_annotations.h"
#include "runtime/session.h"
#include "serialization/checkpoint_file.h"

namespace dflow {

struct CheckpointerOptions {
  std::string dir;  // made when missing
  int keep = 3;     // newest checkpoints kept (>= 1)
  // A checkpoint is synced to the disk (fdatasync) when the last synced one is at least this
  // old, and by Flush; the ones between are whole to any process at once (a killed trainer
  // never leaves a torn one) but may be torn by a crash of the machine, so RestoreNewest after
  // a reboot skips them. The newest synced checkpoint is kept beyond `keep` until a newer one
  // is synced. Zero: every checkpoint synced. (Checkpoints minutes apart are all synced; ones
  // a few milliseconds apart would otherwise each cost a disk flush.)
  std::chrono::milliseconds sync_every{1000};
};

class Checkpointer {
 public:
  // InvalidArgument for an empty dir or keep < 1; the error of making the dir, naming it.
  static Result<std::unique_ptr<Checkpointer>> Create(const CheckpointerOptions& options);
  ~Checkpointer();  // finishes the write under way and any waiting one
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Takes `session`'s variables as the checkpoint of `step` and returns; they are written in
  // the background. The snapshot's error, or an earlier write's.
  Status Save(Session& session, int64_t step) DFLOW_EXCLUDES(mu_);
  // Waits until every snapshot taken so far is written and the newest is synced to the disk;
  // the first write error.
  Status Flush() DFLOW_EXCLUDES(mu_);
  // Checkpoints written so far.
  int64_t written() const DFLOW_EXCLUDES(mu_);
  const std::string& dir() const { return options_.dir; }

  // The checkpoint files in `dir`, newest step first: (step, path).
  static std::vector<std::pair<int64_t, std::string>> List(const std::string& dir);
  // Restores the newest checkpoint of `dir` that loads and fits the session's graph; the ones
  // that do not (a damaged file, say), and after a reboot the ones newer than the last synced
  // (DIR/.synced), are skipped, each reason added to `skipped`. Returns its step. NotFound
  // naming the dir when none restores.
  static Result<int64_t> RestoreNewest(Session& session, const std::string& dir,
                                       std::vector<std::string>* skipped = nullptr);

 private:
  explicit Checkpointer(CheckpointerOptions options);
  void Loop() DFLOW_EXCLUDES(mu_);
  Status Write(int64_t step, const std::map<std::string, Tensor>& values);
  // Syncs the newest checkpoint written if it is not yet, and names it in DIR/.synced.
  Status SyncNewest();
  Status MarkSynced(int64_t step);

  const CheckpointerOptions options_;
  const std::string spare_;  // the file the next write goes through
  // The writer thread's: when the last synced checkpoint was written, its step, the newest's.
  std::optional<std::chrono::steady_clock::time_point> last_sync_;
  int64_t synced_step_ = -1, newest_step_ = -1;
  serialization::CheckpointWriter writer_;  // the writer thread's only
  mutable Mutex mu_;
  CondVar cv_;
  struct Snapshot {
    int64_t step;
    std::map<std::string, Tensor> values;
  };
  std::optional<Snapshot> pending_ DFLOW_GUARDED_BY(mu_);
  bool writing_ DFLOW_GUARDED_BY(mu_) = false;
  bool sync_wanted_ DFLOW_GUARDED_BY(mu_) = false;  // Flush asks the writer to sync the newest
  bool stop_ DFLOW_GUARDED_BY(mu_) = false;
  Status error_ DFLOW_GUARDED_BY(mu_);
  int64_t written_ DFLOW_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace dflow
