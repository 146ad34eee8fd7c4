#include "runtime/train/checkpointer.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "serialization/checkpoint_file.h"
#include "serialization/file_util.h"

namespace dflow {
namespace {

constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".dfckpt";

std::string PathOf(const std::string& dir, int64_t step) {
  return (std::filesystem::path(dir) / fmt::format("{}{}{}", kPrefix, step, kSuffix)).string();
}

// The step of a checkpoint file's name, or -1.
int64_t StepOf(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return -1;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(digits);
}

// The newest synced checkpoint, as "BOOT_ID STEP": the ones newer were not synced, and a crash of
// the machine (a new boot) may have torn them.
constexpr char kSyncedMark[] = ".synced";

std::string BootId() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return boot;
}

// Spare files: ".spare-PID-N.tmp", an old checkpoint kept to be overwritten by the next one.
constexpr char kSparePrefix[] = ".spare-";

std::string SpareOf(const std::string& dir) {
  static std::atomic<int> next{0};
  return (std::filesystem::path(dir) /
          fmt::format("{}{}-{}.tmp", kSparePrefix, getpid(), next.fetch_add(1)))
      .string();
}

// Removes the spare files of processes that are gone (a writer killed before its destructor).
void RemoveOrphanedSpares(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kSparePrefix)) continue;
    const long pid = std::strtol(name.c_str() + sizeof(kSparePrefix) - 1, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

}  // namespace

Result<std::unique_ptr<Checkpointer>> Checkpointer::Create(const CheckpointerOptions& options) {
  if (options.dir.empty()) return InvalidArgument("Checkpointer: no directory given");
  if (options.keep < 1) {
    return InvalidArgument("Checkpointer: keep is {}; it must be >= 1", options.keep);
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec || !std::filesystem::is_directory(options.dir)) {
    return InvalidArgument("cannot make the checkpoint directory '{}': {}", options.dir,
                           ec ? ec.message() : "not a directory");
  }
  RemoveOrphanedSpares(options.dir);
  return std::unique_ptr<Checkpointer>(new Checkpointer(options));
}

Checkpointer::Checkpointer(CheckpointerOptions options)
    : options_(std::move(options)), spare_(SpareOf(options_.dir)) {
  thread_ = std::thread([this] { Loop(); });
}

Checkpointer::~Checkpointer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
  std::error_code ec;
  std::filesystem::remove(spare_, ec);
}

Status Checkpointer::Save(Session& session, int64_t step) {
  {
    MutexLock lock(mu_);
    if (!error_.ok()) return error_;
  }
  auto values = session.SnapshotVariables();
  if (!values.ok()) {
    return values.status().WithPrefix(fmt::format("cannot take checkpoint {}: ", step));
  }
  {
    MutexLock lock(mu_);
    pending_ = Snapshot{step, std::move(values).value()};  // a waiting older one is dropped
  }
  cv_.NotifyAll();
  return Status::OK();
}

Status Checkpointer::Flush() {
  MutexLock lock(mu_);
  sync_wanted_ = true;
  cv_.NotifyAll();
  while (error_.ok() && (pending_.has_value() || writing_ || sync_wanted_)) cv_.Wait(mu_);
  return error_;
}

int64_t Checkpointer::written() const {
  MutexLock lock(mu_);
  return written_;
}

void Checkpointer::Loop() {
  pthread_setname_np(pthread_self(), "dflow ckpt");
  // Below the steps' threads (nice 10: about a tenth of a core's share against one of them), so
  // a write takes what the steps leave; a write behind takes a later snapshot. (SCHED_IDLE
  // starved it: 4 of 100 checkpoints written while the MLP trained on both cores.)
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && !pending_.has_value() && !sync_wanted_) cv_.Wait(mu_);
    if (!pending_.has_value()) {
      // Flushed or stopping with nothing left to write: the newest made durable.
      if (error_.ok() && newest_step_ != synced_step_) {
        lock.Unlock();
        Status s = SyncNewest();
        lock.Lock();
        if (!s.ok() && error_.ok()) error_ = s;
      }
      sync_wanted_ = false;
      cv_.NotifyAll();
      if (stop_) return;
      continue;
    }
    Snapshot snapshot = std::move(*pending_);
    pending_.reset();
    if (!error_.ok()) continue;  // a failed writer writes no more
    writing_ = true;
    lock.Unlock();
    Status s = Write(snapshot.step, snapshot.values);
    snapshot.values.clear();  // the buffers go before the next snapshot comes
    lock.Lock();
    writing_ = false;
    if (s.ok()) {
      written_++;
    } else if (error_.ok()) {
      error_ = s;
    }
    cv_.NotifyAll();
  }
}

Status Checkpointer::Write(int64_t step, const std::map<std::string, Tensor>& values) {
  const auto now = std::chrono::steady_clock::now();
  // A step at or below the synced one's (training rewound after a recovery) replaces a file
  // that DIR/.synced vouches for: synced too.
  const bool sync = !last_sync_ || now - *last_sync_ >= options_.sync_every || step <= synced_step_;
  RETURN_IF_ERROR(writer_.Save(values, PathOf(options_.dir, step), spare_, sync));
  newest_step_ = step;
  if (sync) {
    last_sync_ = now;
    RETURN_IF_ERROR(MarkSynced(step));
  }
  // The newest `keep` stay, and the newest synced. The next older becomes the spare the next
  // checkpoint overwrites (the spare went with this write's rename); the rest are removed, and
  // one that cannot be is left for the next time.
  auto all = List(options_.dir);
  bool spared = false;
  for (size_t i = static_cast<size_t>(options_.keep); i < all.size(); ++i) {
    if (all[i].first == synced_step_) continue;
    std::error_code ec;
    if (!spared) {
      std::filesystem::rename(all[i].second, spare_, ec);
      spared = !ec;
      if (spared) continue;
    }
    std::filesystem::remove(all[i].second, ec);
  }
  return Status::OK();
}

Status Checkpointer::SyncNewest() {
  RETURN_IF_ERROR(serialization::SyncFile(PathOf(options_.dir, newest_step_)));
  last_sync_ = std::chrono::steady_clock::now();
  return MarkSynced(newest_step_);
}

Status Checkpointer::MarkSynced(int64_t step) {
  RETURN_IF_ERROR(serialization::WriteFileAtomically(
      (std::filesystem::path(options_.dir) / kSyncedMark).string(),
      fmt::format("{} {}\n", BootId(), step)));
  synced_step_ = step;
  return Status::OK();
}

std::vector<std::pair<int64_t, std::string>> Checkpointer::List(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const int64_t step = StepOf(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Result<int64_t> Checkpointer::RestoreNewest(Session& session, const std::string& dir,
                                            std::vector<std::string>* skipped) {
  // After a reboot, the checkpoints newer than the last synced one may be torn.
  int64_t trusted_through = std::numeric_limits<int64_t>::max();
  std::string boot;
  int64_t synced = -1;
  if (std::ifstream((std::filesystem::path(dir) / kSyncedMark).string()) >> boot >> synced &&
      boot != BootId()) {
    trusted_through = synced;
  }
  for (const auto& [step, path] : List(dir)) {
    if (step > trusted_through) {
      if (skipped != nullptr) {
        skipped->push_back(fmt::format(
            "'{}' was not synced to the disk and the machine has restarted since (the newest "
            "synced is step {}): it may be torn",
            path, trusted_through));
      }
      continue;
    }
    Status s = session.RestoreCheckpoint(path);
    if (s.ok()) return step;
    if (skipped != nullptr) skipped->push_back(s.ToString());
  }
  return NotFound("no checkpoint in '{}' restores", dir);
}

}  // namespace dflow
