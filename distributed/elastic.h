// Elastic data parallelism: the sessions of a synchronously replicated training job (a replica
// on each worker of a cluster, rewrite/replicate.h) that goes on with fewer replicas when a worker
// is lost for good, as TorchElastic does for PyTorch.
//
//   ElasticReplicas elastic(single.graph(), replicate, cluster, {}, {.wait_seconds = 10});
//   ASSIGN_OR_RETURN(Session* session, elastic.Start());
//   RETURN_IF_ERROR(session->Run({}, {}, {"init"}).status());
//   TrainLoopOptions o{...};  // with checkpoint_dir
//   o.reconnect = [&] { return elastic.Reconnect(); };
//   RETURN_IF_ERROR(TrainLoop(*session, batches, o, on_epoch));
//
// After a failure TrainLoop asks Reconnect for a session: one on every worker as long as they
// all answer (a worker restarted at its address comes back), and once a worker has not answered
// for wait_seconds, one whose replicas are on the workers that do (each keeps its task name:
// losing worker 0 of three leaves tasks 1 and 2, ClusterSpec's sparse form). The names a
// synchronous step
// feeds, fetches and runs do not depend on the replica count, and every replica's variables of
// the smaller graph are in the checkpoint TrainLoop restores, so training goes on where the
// checkpoint was: N replicas on a batch train as one on the whole batch, so it goes on as it
// would have. (The asynchronous modes name each replica's steps, so they are not elastic.)
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/distributed_session.h"
#include "rewrite/replicate.h"

namespace dflow::distributed {

struct ElasticOptions {
  std::string job = "worker";  // its tasks hold the replicas, one each
  // How long a lost worker has to answer again before training goes on without it.
  double wait_seconds = 10;
  int min_replicas = 1;
  // When set, the replica count must divide it (the batch is split evenly): the most workers
  // that do are used.
  int64_t batch_size = 0;
  std::chrono::milliseconds probe_timeout{2000};  // for a worker to answer
};

class ElasticReplicas {
 public:
  // `replicate.devices` and `hosts` are filled from the workers of `cluster`'s job in use;
  // `replicate.mode` must be kSync.
  ElasticReplicas(Graph single, ops::ReplicateOptions replicate, DistributedOptions cluster,
                  SessionOptions session_options, ElasticOptions options);

  // A session with a replica on every worker of the job. Errors: Replicate's and
  // DistributedSession::Create's; InvalidArgument for an asynchronous mode.
  Result<Session*> Start();
  // For TrainLoopOptions::reconnect (the previous session is closed first): see above.
  // Unavailable while waiting for a lost worker, and when fewer than min_replicas answer.
  Result<Session*> Reconnect();

  int replicas() const { return static_cast<int>(in_use_.size()); }
  // The addresses of the workers holding replicas.
  const std::vector<std::string>& workers() const { return in_use_; }
  Session* session() const { return session_.get(); }

 private:
  // A session with a replica on each worker of `workers` (a subset of all_, in its order).
  Result<Session*> Build(const std::vector<std::string>& workers);
  // Whether task `index` of the job (at all_[index]) answers a session's connection under its
  // own name.
  bool Answers(size_t index) const;

  const Graph single_;
  ops::ReplicateOptions replicate_;
  DistributedOptions cluster_;
  SessionOptions session_options_;
  ElasticOptions options_;
  std::vector<std::string> all_, in_use_;  // the job's workers; those in the session
  std::unique_ptr<Session> session_;
  std::optional<std::chrono::steady_clock::time_point> lost_since_;
};

}  // namespace dflow::distributed
