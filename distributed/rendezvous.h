// Rendezvous: workers find their master instead of being listed in a cluster file.
//
// The master listens (RendezvousServer); each worker, told the master's address (dflow-worker
// --master, or its launcher's variables: tools/launch_rank.h), connects with the cluster token
// and registers where it listens, its rank and its devices (Registration::Join). Once the
// expected number have joined, the master orders them by rank (a worker without one takes the
// lowest rank left, in the order they came) and answers each with its task name,
// /job:worker/task:RANK. The ClusterSpec it returns lists them, and a DistributedSession connects
// to them as to a cluster file's.
//
// A worker stays connected to the rendezvous for as long as the server lives, and so learns
// when its master has gone (dflow-worker then exits, which ends a launcher's step). A master
// keeps its RendezvousServer while it wants its workers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/cluster_spec.h"
#include "distributed/messages.h"
#include "graph/mutex.h"
#include "transport/transport.h"

namespace dflow::distributed {

struct RendezvousOptions {
  // Where the master listens for its workers, "HOST:PORT" (port 0: a free one).
  std::string listen;
  std::string token;  // the cluster token the workers present
  // How many workers to wait for; 0: the world size the first to join reports (its launcher's).
  int expected_workers = 0;
  // How long WaitForWorkers waits for all of them.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  std::string transport = "ucx";
  // One line per worker that joins or is refused; null: stderr.
  std::function<void(std::string_view)> log;
};

class RendezvousServer {
 public:
  // Listens at once (workers may join before WaitForWorkers is called). InvalidArgument for a
  // negative expected_workers; the transport's error for an address it cannot listen on.
  static Result<std::unique_ptr<RendezvousServer>> Create(RendezvousOptions options);
  // Closes the rendezvous; workers that joined with --master see their master gone.
  ~RendezvousServer();

  // The address it listens on (the real port when 0 was asked).
  std::string address() const;

  // Waits until every expected worker has joined, then answers them and returns the cluster:
  // {"worker": [address of rank 0, rank 1, ...]}. Called once. DeadlineExceeded after the
  // timeout naming the ranks still missing and the workers that joined; InvalidArgument when the
  // workers disagree (two alive with one rank, a rank past the world size, world sizes that
  // differ), naming them. Workers waiting when it fails are told the same error.
  Result<ClusterSpec> WaitForWorkers() DFLOW_EXCLUDES(mu_);

 private:
  struct Joined {
    std::string from;  // the worker's registration task
    RegisterRequest request;
    transport::Transport::Reply reply;
  };
  explicit RendezvousServer(RendezvousOptions options) : options_(std::move(options)) {}
  void Handle(const transport::Transport::CallInfo& call, std::string payload,
              transport::Transport::Reply reply) DFLOW_EXCLUDES(mu_);
  void Log(const std::string& line) const;
  // "rank 0 at HOST:PORT (Slurm), ..." for errors.
  std::string Describe() const DFLOW_REQUIRES(mu_);
  // Forgets workers whose connection is gone (a restarted one may then take its rank).
  void DropGone() DFLOW_REQUIRES(mu_);
  // Closes the rendezvous with `s` (the first error stays) and gives the replies of the workers
  // waiting, to be told `s` once the lock is released.
  std::vector<transport::Transport::Reply> Fail(const Status& s) DFLOW_REQUIRES(mu_);

  RendezvousOptions options_;
  std::unique_ptr<transport::Transport> transport_;
  mutable Mutex mu_;
  CondVar changed_;
  std::vector<Joined> joined_ DFLOW_GUARDED_BY(mu_);
  int expected_ DFLOW_GUARDED_BY(mu_) = 0;
  Status error_ DFLOW_GUARDED_BY(mu_);         // the first disagreement
  bool closed_ DFLOW_GUARDED_BY(mu_) = false;  // answered (or failed): later joins are refused
};

// What a master told "--rendezvous HOST:PORT [--workers N]" does: listens, prints
// "waiting for N workers at HOST:PORT" on stdout (the real port, for a launcher to pass on), and
// waits for them. `*server` keeps the rendezvous open for as long as the workers are wanted.
Result<ClusterSpec> GatherWorkers(RendezvousOptions options,
                                  std::unique_ptr<RendezvousServer>* server);

struct RegisterOptions {
  std::string master;  // the master's rendezvous, "HOST:PORT"
  std::string token;
  RegisterRequest request;
  // How long to keep trying to reach the master (it may start after its workers) and to wait for
  // the rest of the workers to join.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  std::string transport = "ucx";
  // Told "waiting for the master at ..." once while the master cannot be reached; null: stderr.
  std::function<void(std::string_view)> log;
};

// A worker's place in its master's cluster, for the master's life.
class Registration {
 public:
  // Joins the master's rendezvous and waits for its answer. Unavailable naming the master when
  // it cannot be reached within the timeout; PermissionDenied for a wrong token; the master's
  // error (DeadlineExceeded, InvalidArgument) unchanged.
  static Result<std::unique_ptr<Registration>> Join(RegisterOptions options);

  const RegisterReply& reply() const { return reply_; }
  // True once the master's rendezvous is gone (the master exited, or its host is unreachable).
  bool master_gone() const;

 private:
  Registration() = default;
  std::unique_ptr<transport::Transport> transport_;
  std::string master_task_;
  RegisterReply reply_;
};

}  // namespace dflow::distributed
