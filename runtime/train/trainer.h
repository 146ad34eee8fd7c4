// A small training loop: feeds batches, runs steps, and reports loss and throughput with a
// progress bar on stderr (redrawn in place on a terminal, a line per quarter epoch otherwise).
//
//   Batcher batches(train, 128, /*seed=*/1);
//   TrainLoopOptions opts{.epochs = 5, .loss = loss.name(), .train_target = step.name()};
//   RETURN_IF_ERROR(TrainLoop(*session, batches, opts, [&](const EpochStats& s) { ... }));
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "runtime/train/dataset.h"

namespace dflow {

struct TrainLoopOptions {
  int epochs = 1;
  std::string images_feed = "x";       // placeholder fed with each batch's images
  std::string labels_feed = "labels";  // placeholder fed with each batch's labels
  std::string loss;                    // scalar tensor fetched every step
  std::string train_target;            // node run every step (the optimizer's update)
  // Synchronous replicas fed their shares (ops::ReplicateOptions::feed_shards): each batch is
  // cut into this many equal parts along its first dimension, part r fed to replica r's
  // placeholders ("x" for replica 0, "replicaR/x" for the others). 0 or 1: whole batches.
  int feed_shards = 0;
  bool progress = true;
  int64_t max_steps_per_epoch = -1;  // > 0: shortened epochs (for CI)
  // Checkpoints (runtime/train/checkpointer.h), none while checkpoint_dir is empty: the variables
  // every checkpoint_every_steps steps (counted over all epochs) and whenever
  // checkpoint_every_seconds have passed since the last, written by a background thread while
  // training goes on, as DIR/ckpt-STEP.dfckpt; the newest checkpoint_keep stay. The last step's
  // is written before TrainLoop returns.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_seconds = 0;
  int checkpoint_keep = 3;
  // Recovery from a lost worker (needs checkpoints): when a step fails with Unavailable,
  // `reconnect` is called (again every half second, for at most recovery_timeout_seconds) until
  // it gives a session of the same graph, typically a new DistributedSession once the worker is
  // back; the caller owns it, and TrainLoop uses it from then on (the failed one may be gone).
  // The newest checkpoint is restored into it and training goes on from that step: the steps
  // since are done again, on the batches they had (the epoch is taken up where the checkpoint
  // was), so a recovered run ends as an uninterrupted one would. Each recovery is reported on
  // stderr and counted in EpochStats.
  std::function<Result<Session*>()> reconnect;
  double recovery_timeout_seconds = 60;
  // A step (or a replica's step, or an update) that has not finished after this many seconds
  // fails with DeadlineExceeded, on every task (0: no deadline). With recover_on_deadline (and
  // `reconnect`), that is recovered from as a lost worker is: a worker that hangs, or a link
  // that stalls without breaking, ends in a recovery instead of a wait.
  double step_timeout_seconds = 0;
  bool recover_on_deadline = false;
  // Asynchronous replicas (ops::Replicate with parameter servers in an asynchronous mode): what
  // each replica feeds, fetches and runs. When set, images_feed, labels_feed, loss and
  // train_target are not used: the replicas train at once, each from a thread of its own
  // taking the next batch of the epoch, so a step is one replica's batch and update. Checkpoints
  // hold every replica between steps while the variables are taken; a recovery stops them all.
  struct Replica {
    std::string images_feed = "x";
    std::string labels_feed = "labels";
    std::string loss;
    std::string train_target;
  };
  std::vector<Replica> replicas;
  // With `replicas`: a replica that has done more than max_staleness steps more than the
  // slowest replica still training waits for it (stale synchronous parallel; 0 keeps them in
  // lockstep); -1: none waits (asynchronous).
  int max_staleness = -1;
  // With `replicas`, synchronous replicas with backups (ops::Replicate's backup_workers): every
  // step starts each idle replica on a batch of its own and, as soon as replicas.size() -
  // backup_workers of them are done, runs apply_target with weights_feed fed 1/k for each of
  // those k replicas and 0 for the others. A replica still running then has its gradient
  // dropped and joins a later step when it is done, so a straggler never holds a step.
  int backup_workers = 0;
  std::string apply_target;
  std::string weights_feed;
};

struct EpochStats {
  int epoch = 0;  // 1-based
  int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
  double examples_per_second = 0;
  double median_step_ms = 0;
  int64_t checkpoints = 0;   // taken so far, all epochs
  int recoveries = 0;        // from lost workers, so far
  int64_t steps_redone = 0;  // by those recoveries
  // Asynchronous replicas: per step, the steps of other replicas that ended while it ran (an
  // upper bound on the updates its gradient missed), the mean and the most over the epoch; and
  // the times a replica was held back by max_staleness.
  double mean_staleness = 0;
  int64_t most_staleness = 0;
  int64_t held = 0;
  // Backup workers: the replicas' gradients dropped (done after their step's update).
  int64_t dropped = 0;
};

// Runs the epochs; calls on_epoch after each (again for an epoch that a recovery went back
// into), stopping at the first error from a step (one it cannot recover from) or from on_epoch. A
// non-finite loss is an InvalidArgument naming the epoch and step.
Status TrainLoop(Session& session, Batcher& batches, const TrainLoopOptions& options,
                 const std::function<Status(const EpochStats&)>& on_epoch);

// The fraction of `data` whose label is the argmax of `logits` (fetched in batches).
Result<double> Accuracy(Session& session, const Dataset& data, const std::string& images_feed,
                        const std::string& logits, int64_t batch_size = 1000);

}  // namespace dflow
