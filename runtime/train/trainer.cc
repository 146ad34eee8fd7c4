#include "runtime/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "graph/mutex.h"
#include "rewrite/replicate.h"
#include "runtime/train/checkpointer.h"

namespace dflow {
namespace {

// A step's options: its deadline, when TrainLoopOptions gives one.
Session::RunOptions StepRunOptions(const TrainLoopOptions& o) {
  Session::RunOptions run;
  if (o.step_timeout_seconds > 0) {
    run.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.step_timeout_seconds * 1000));
  }
  return run;
}

using Clock = std::chrono::steady_clock;

void DrawProgress(const EpochStats& s, int epochs, int64_t step, int64_t total, double loss,
                  double seconds, bool tty) {
  const int width = 30;
  int filled = total > 0 ? static_cast<int>(width * step / total) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "%sepoch %d/%d [%s] %lld/%lld loss %.4f %.1fs%s", tty ? "\r" : "", s.epoch,
               epochs, bar.c_str(), static_cast<long long>(step), static_cast<long long>(total),
               loss, seconds, tty ? "" : "\n");
  std::fflush(stderr);
}

// After `what` failed with `why` (`step` steps done): a session from o.reconnect (retried until
// the recovery timeout) with the newest checkpoint restored; returns that checkpoint's step.
Result<int64_t> Recover(const Status& why, const std::string& what, int64_t step,
                        const TrainLoopOptions& o, Checkpointer& checkpointer, Session** current) {
  std::fprintf(stderr, "TrainLoop: %s failed: %s; recovering from the newest checkpoint\n",
               what.c_str(), why.ToString().c_str());
  RETURN_IF_ERROR(checkpointer.Flush());  // the newest snapshot on disk
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(o.recovery_timeout_seconds));
  for (;;) {
    auto session = o.reconnect();
    if (session.ok() && *session != nullptr) {
      *current = *session;
      break;
    }
    Status last = session.ok() ? Internal("reconnect gave no session") : session.status();
    if (Clock::now() + std::chrono::milliseconds(500) > deadline) {
      return Unavailable(
          "could not recover from the failure of {} within {} s ({}); the last attempt: {}", what,
          o.recovery_timeout_seconds, why.ToString(), last.ToString());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::vector<std::string> skipped;
  auto restored = Checkpointer::RestoreNewest(**current, checkpointer.dir(), &skipped);
  for (const auto& s : skipped) {
    std::fprintf(stderr, "TrainLoop: skipped a checkpoint: %s\n", s.c_str());
  }
  RETURN_IF_ERROR(restored.status());
  std::fprintf(stderr,
               "TrainLoop: resumed from the checkpoint of step %lld (%lld steps done again)\n",
               static_cast<long long>(*restored), static_cast<long long>(step - *restored));
  return *restored;
}

// The step's feeds: the batch whole, or cut into o.feed_shards parts along its first dimension,
// part r under replica r's names.
Result<Session::Feeds> StepFeeds(const TrainLoopOptions& o, const Tensor& images,
                                 const Tensor& labels) {
  if (o.feed_shards <= 1) return Session::Feeds{{o.images_feed, images}, {o.labels_feed, labels}};
  Session::Feeds feeds;
  for (const auto& [name, whole] : {std::pair{o.images_feed, images}, {o.labels_feed, labels}}) {
    const int64_t rows = whole.shape().rank() > 0 ? whole.shape()[0] : 0;
    if (rows % o.feed_shards != 0) {
      return InvalidArgument("TrainLoop: a batch of {} rows of '{}' does not split into {} shards",
                             rows, name, o.feed_shards);
    }
    std::vector<int64_t> dims = whole.shape().dim_vector();
    dims[0] = rows / o.feed_shards;
    const size_t bytes = whole.num_bytes() / o.feed_shards;
    for (int r = 0; r < o.feed_shards; ++r) {
      Tensor part(whole.dtype(), Shape(dims));
      std::memcpy(part.raw_data(), static_cast<const char*>(whole.raw_data()) + r * bytes, bytes);
      feeds.emplace_back(ops::ReplicaName(name, r), std::move(part));
    }
  }
  return feeds;
}

double ScalarLoss(const Tensor& t) {
  return t.dtype() == DType::kF64 ? t.data<double>()[0] : t.data<float>()[0];
}

// What an epoch of replicas running at once shares: its setup, the first failure (which stops
// every replica and cancels their running steps) and the epoch's figures.
class ReplicaEpoch {
 public:
  struct Setup {
    Session* session;
    Batcher* batches;
    const TrainLoopOptions* options;
    int epoch;
    int64_t total;                 // batches in the epoch
    int64_t taken;                 // of them, already taken (passed over after a recovery)
    int64_t step;                  // steps done before, all epochs
    std::vector<int64_t>* clocks;  // steps per replica, kept across epochs
    std::function<bool(int64_t step)> checkpoint_due;
    std::function<Status(int64_t step)> checkpoint;
  };
  explicit ReplicaEpoch(Setup setup) : s_(std::move(setup)), step_(s_.step), taken_(s_.taken) {}

  // After the epoch: its figures into *stats, and the loop's running totals.
  void Fill(EpochStats* stats, double* loss_sum, int64_t* examples, std::vector<double>* step_ms,
            int64_t* step) DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    stats->steps = steps_;
    stats->mean_staleness = steps_ ? static_cast<double>(staleness_sum_) / steps_ : 0;
    stats->most_staleness = most_staleness_;
    stats->held = held_;
    stats->dropped = dropped_;
    *loss_sum = loss_sum_;
    *examples = examples_;
    *step_ms = step_ms_;
    *step = step_;
  }

 protected:
  void Fail(const Status& why, const std::string& what) DFLOW_REQUIRES(mu_) {
    if (first_.ok()) {
      first_ = why;
      what_ = what;
    }
    stop_ = true;
    cancel_.Cancel(why);
    cv_.NotifyAll();
  }

  const Setup s_;
  const bool tty_ = isatty(STDERR_FILENO);
  CancellationToken cancel_;
  Mutex mu_;
  CondVar cv_;
  Status first_ DFLOW_GUARDED_BY(mu_);
  std::string what_ DFLOW_GUARDED_BY(mu_);
  bool stop_ DFLOW_GUARDED_BY(mu_) = false;
  int64_t step_ DFLOW_GUARDED_BY(mu_);   // all epochs
  int64_t taken_ DFLOW_GUARDED_BY(mu_);  // batches of this epoch
  int64_t steps_ DFLOW_GUARDED_BY(mu_) = 0;
  int64_t examples_ DFLOW_GUARDED_BY(mu_) = 0;
  double loss_sum_ DFLOW_GUARDED_BY(mu_) = 0;
  std::vector<double> step_ms_ DFLOW_GUARDED_BY(mu_);
  int64_t staleness_sum_ DFLOW_GUARDED_BY(mu_) = 0;
  int64_t most_staleness_ DFLOW_GUARDED_BY(mu_) = 0;
  int64_t held_ DFLOW_GUARDED_BY(mu_) = 0;
  int64_t dropped_ DFLOW_GUARDED_BY(mu_) = 0;
};

// One epoch of asynchronous replicas (TrainLoopOptions::replicas), each from a thread of its
// own: a replica waits while a checkpoint is taken or while it is too far ahead, takes the next
// batch and runs its step.
class AsyncEpoch : public ReplicaEpoch {
 public:
  explicit AsyncEpoch(Setup setup) : ReplicaEpoch(std::move(setup)) {
    active_.assign(s_.options->replicas.size(), true);
  }

  // Runs the epoch; the first failure, with what failed in *what.
  Status Run(std::string* what) DFLOW_EXCLUDES(mu_) {
    start_ = Clock::now();
    std::vector<std::thread> threads;
    for (size_t r = 0; r < s_.options->replicas.size(); ++r) {
      threads.emplace_back([this, r] { Replica(static_cast<int>(r)); });
    }
    for (auto& t : threads) t.join();
    MutexLock lock(mu_);
    *what = what_;
    return first_;
  }

 private:
  // Whether replica r is more than max_staleness steps ahead of the slowest active one.
  bool TooFarAhead(int r) DFLOW_REQUIRES(mu_) {
    const int bound = s_.options->max_staleness;
    if (bound < 0) return false;
    int64_t slowest = (*s_.clocks)[r];
    for (size_t j = 0; j < active_.size(); ++j) {
      if (active_[j]) slowest = std::min(slowest, (*s_.clocks)[j]);
    }
    return (*s_.clocks)[r] - slowest > bound;
  }

  void Replica(int r) DFLOW_EXCLUDES(mu_) {
    const TrainLoopOptions::Replica& names = s_.options->replicas[r];
    Tensor images, labels;
    {
      // All start together: a replica whose thread starts late still gets its share.
      MutexLock lock(mu_);
      ++ready_;
      cv_.NotifyAll();
      cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return ready_ == active_.size(); });
    }
    for (;;) {
      int64_t started = 0;
      {
        MutexLock lock(mu_);
        bool held = false;
        cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) {
          if (stop_) return true;
          if (pausing_) return false;
          if (TooFarAhead(r)) {
            held = true;
            return false;
          }
          return true;
        });
        if (held) ++held_;
        if (stop_ || taken_ >= s_.total || !s_.batches->Next(&images, &labels)) {
          active_[r] = false;  // the others no longer wait for it
          cv_.NotifyAll();
          return;
        }
        ++taken_;
        ++running_;
        started = step_;
      }
      const auto t0 = Clock::now();
      Session::RunOptions run = StepRunOptions(*s_.options);
      run.cancellation = &cancel_;
      auto out = s_.session->Run({{names.images_feed, images}, {names.labels_feed, labels}},
                                 {names.loss}, {names.train_target}, run);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      MutexLock lock(mu_);
      --running_;
      cv_.NotifyAll();
      if (!out.ok()) {
        if (!stop_) Fail(out.status(), fmt::format("step {} (replica {})", step_ + 1, r));
        return;
      }
      const double loss = ScalarLoss(out->at(0));
      if (!std::isfinite(loss)) {
        Fail(InvalidArgument("loss is {} at epoch {} step {} (replica {})", loss, s_.epoch,
                             steps_ + 1, r),
             "");
        return;
      }
      const int64_t stale = step_ - started;
      staleness_sum_ += stale;
      most_staleness_ = std::max(most_staleness_, stale);
      loss_sum_ += loss;
      examples_ += images.shape()[0];
      step_ms_.push_back(ms);
      ++steps_;
      ++step_;
      ++(*s_.clocks)[r];
      const int64_t done = s_.taken + steps_;
      if (s_.options->progress &&
          (tty_ ? done % 10 == 0 || done == s_.total : done >= next_line_)) {
        EpochStats shown;
        shown.epoch = s_.epoch;
        DrawProgress(shown, s_.options->epochs, done, s_.total, loss_sum_ / steps_,
                     std::chrono::duration<double>(Clock::now() - start_).count(), tty_);
        next_line_ = done + std::max<int64_t>(1, s_.total / 4);
      }
      if (!pausing_ && s_.checkpoint_due && s_.checkpoint_due(step_)) {
        // Every replica between steps while the variables are taken.
        pausing_ = true;
        cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return running_ == 0 || stop_; });
        if (!stop_) {
          const int64_t at = step_;
          lock.Unlock();
          Status saved = s_.checkpoint(at);
          lock.Lock();
          if (!saved.ok()) Fail(saved, fmt::format("the checkpoint of step {}", at));
        }
        pausing_ = false;
        cv_.NotifyAll();
      }
    }
  }

  Clock::time_point start_;
  bool pausing_ DFLOW_GUARDED_BY(mu_) = false;
  int running_ DFLOW_GUARDED_BY(mu_) = 0;
  size_t ready_ DFLOW_GUARDED_BY(mu_) = 0;
  std::vector<bool> active_ DFLOW_GUARDED_BY(mu_);
  int64_t next_line_ DFLOW_GUARDED_BY(mu_) = 0;
};

// One epoch of synchronous replicas with backups (TrainLoopOptions::backup_workers): the
// calling thread starts the idle replicas of each step, waits for the first k to be done and
// runs the update; a thread per replica runs that replica's steps.
class BackupEpoch : public ReplicaEpoch {
 public:
  explicit BackupEpoch(Setup setup)
      : ReplicaEpoch(std::move(setup)),
        n_(static_cast<int>(s_.options->replicas.size())),
        k_(n_ - s_.options->backup_workers) {
    work_.resize(n_);
    running_.assign(n_, false);
  }

  Status Run(std::string* what) DFLOW_EXCLUDES(mu_) {
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) threads.emplace_back([this, r] { Replica(r); });
    Status status = Steps(start);
    {
      // Replicas still running finish their step (its gradient dropped) before the threads go.
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return busy_ == 0 || stop_; });
      stop_ = true;
      cv_.NotifyAll();
    }
    for (auto& t : threads) t.join();
    MutexLock lock(mu_);
    if (status.ok()) status = first_;
    *what = status.ok() ? "" : what_;
    return status;
  }

 private:
  struct Work {
    bool assigned = false;
    int64_t tag = 0;  // the step it is for
    Tensor images, labels;
  };

  // The coordinator: each step, the idle replicas on new batches, the first k done, the update.
  Status Steps(Clock::time_point start) DFLOW_EXCLUDES(mu_) {
    const TrainLoopOptions& o = *s_.options;
    int64_t next_line = 0;
    for (;;) {
      const auto t0 = Clock::now();
      MutexLock lock(mu_);
      int started = 0;
      for (int r = 0; r < n_ && !stop_; ++r) {
        Work& w = work_[r];
        if (running_[r]) continue;
        if (taken_ >= s_.total || !s_.batches->Next(&w.images, &w.labels)) break;
        ++taken_;
        w.assigned = true;
        w.tag = step_;
        running_[r] = true;
        ++busy_;
        ++started;
      }
      cv_.NotifyAll();
      counted_.clear();
      if (stop_) return first_;
      if (started < k_) {
        // Too few batches left for a step: the epoch ends (those started are dropped).
        dropped_ += started;
        return Status::OK();
      }
      cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) {
        return stop_ || static_cast<int>(counted_.size()) >= k_;
      });
      if (stop_) return first_;
      Tensor weights(DType::kF32, Shape{n_});
      for (int r = 0; r < n_; ++r) weights.data<float>()[r] = 0;
      double loss = 0;
      for (const auto& [r, l] : counted_) {
        weights.data<float>()[r] = 1.0f / static_cast<float>(k_);
        loss += l;
      }
      lock.Unlock();
      Session::RunOptions run = StepRunOptions(*s_.options);
      run.cancellation = &cancel_;
      auto applied = s_.session->Run({{o.weights_feed, weights}}, {}, {o.apply_target}, run);
      lock.Lock();
      if (!applied.ok()) {
        if (!stop_) Fail(applied.status(), fmt::format("the update of step {}", step_ + 1));
        return first_;
      }
      loss /= k_;
      if (!std::isfinite(loss)) {
        Fail(InvalidArgument("loss is {} at epoch {} step {}", loss, s_.epoch, steps_ + 1), "");
        return first_;
      }
      loss_sum_ += loss;
      examples_ += step_examples_;
      step_examples_ = 0;
      step_ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      ++steps_;
      ++step_;
      const int64_t at = step_;
      const int64_t done = taken_;
      const double mean = loss_sum_ / steps_;
      const int64_t steps = steps_;
      lock.Unlock();
      if (o.progress && (tty_ ? steps % 10 == 0 || done >= s_.total : done >= next_line)) {
        EpochStats shown;
        shown.epoch = s_.epoch;
        DrawProgress(shown, o.epochs, done, s_.total, mean,
                     std::chrono::duration<double>(Clock::now() - start).count(), tty_);
        next_line = done + std::max<int64_t>(1, s_.total / 4);
      }
      if (s_.checkpoint_due && s_.checkpoint_due(at)) {
        // The variables change only in updates, all made here; replicas still running write
        // nothing but their own gradient slots.
        if (Status saved = s_.checkpoint(at); !saved.ok()) {
          MutexLock again(mu_);
          Fail(saved, fmt::format("the checkpoint of step {}", at));
          return first_;
        }
      }
    }
  }

  void Replica(int r) DFLOW_EXCLUDES(mu_) {
    const TrainLoopOptions::Replica& names = s_.options->replicas[r];
    for (;;) {
      Tensor images, labels;
      int64_t tag = 0;
      {
        MutexLock lock(mu_);
        cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return work_[r].assigned || stop_; });
        if (stop_) return;
        work_[r].assigned = false;
        images = std::move(work_[r].images);
        labels = std::move(work_[r].labels);
        tag = work_[r].tag;
      }
      Session::RunOptions run = StepRunOptions(*s_.options);
      run.cancellation = &cancel_;
      auto out = s_.session->Run({{names.images_feed, images}, {names.labels_feed, labels}},
                                 {names.loss}, {names.train_target}, run);
      MutexLock lock(mu_);
      --busy_;
      running_[r] = false;
      cv_.NotifyAll();
      if (!out.ok()) {
        if (!stop_) Fail(out.status(), fmt::format("step {} (replica {})", tag + 1, r));
        continue;
      }
      if (tag == step_ && static_cast<int>(counted_.size()) < k_) {
        counted_.emplace_back(r, ScalarLoss(out->at(0)));
        step_examples_ += images.shape()[0];
      } else {
        ++dropped_;
      }
    }
  }

  const int n_, k_;
  std::vector<Work> work_ DFLOW_GUARDED_BY(mu_);
  std::vector<bool> running_ DFLOW_GUARDED_BY(mu_);  // a step of the replica's is under way
  int busy_ DFLOW_GUARDED_BY(mu_) = 0;               // of them running
  std::vector<std::pair<int, double>> counted_ DFLOW_GUARDED_BY(mu_);  // this step's, and losses
  int64_t step_examples_ DFLOW_GUARDED_BY(mu_) = 0;
};

// NotFound naming the option and the node when `ref` ("node" or "node:i") names no node of
// `graph`: checked before the first step, so a misspelt name of a replica that might not get a
// step before the others finish an epoch still ends the loop.
Status CheckNamed(const Graph& graph, const std::string& what, const std::string& ref) {
  if (ref.empty()) return Status::OK();
  ASSIGN_OR_RETURN(InputRef parsed, ParseInputRef(ref));
  if (!graph.FindNode(parsed.node)) {
    return NotFound("TrainLoop: {} '{}': no node named '{}'", what, ref, parsed.node);
  }
  return Status::OK();
}

Status CheckNames(const Graph& graph, const TrainLoopOptions& o) {
  if (o.replicas.empty()) {
    RETURN_IF_ERROR(CheckNamed(graph, "images_feed", o.images_feed));
    RETURN_IF_ERROR(CheckNamed(graph, "labels_feed", o.labels_feed));
    RETURN_IF_ERROR(CheckNamed(graph, "loss", o.loss));
    RETURN_IF_ERROR(CheckNamed(graph, "train_target", o.train_target));
    for (int r = 1; r < o.feed_shards; ++r) {
      RETURN_IF_ERROR(CheckNamed(graph, "images_feed's shard", ops::ReplicaName(o.images_feed, r)));
      RETURN_IF_ERROR(CheckNamed(graph, "labels_feed's shard", ops::ReplicaName(o.labels_feed, r)));
    }
  }
  for (size_t r = 0; r < o.replicas.size(); ++r) {
    const TrainLoopOptions::Replica& rep = o.replicas[r];
    const std::string of = fmt::format("replica {}'s ", r);
    RETURN_IF_ERROR(CheckNamed(graph, of + "images_feed", rep.images_feed));
    RETURN_IF_ERROR(CheckNamed(graph, of + "labels_feed", rep.labels_feed));
    RETURN_IF_ERROR(CheckNamed(graph, of + "loss", rep.loss));
    RETURN_IF_ERROR(CheckNamed(graph, of + "train_target", rep.train_target));
  }
  RETURN_IF_ERROR(CheckNamed(graph, "apply_target", o.apply_target));
  return CheckNamed(graph, "weights_feed", o.weights_feed);
}

}  // namespace

Status TrainLoop(Session& session, Batcher& batches, const TrainLoopOptions& o,
                 const std::function<Status(const EpochStats&)>& on_epoch) {
  if (o.replicas.empty() && (o.loss.empty() || o.train_target.empty())) {
    return InvalidArgument("TrainLoop needs a loss to fetch and a train target");
  }
  if (o.backup_workers != 0 &&
      (o.backup_workers < 0 || o.backup_workers >= static_cast<int>(o.replicas.size()) ||
       o.apply_target.empty() || o.weights_feed.empty())) {
    return InvalidArgument(
        "TrainLoop: {} backup workers need fewer backups than the {} replicas, an apply_target "
        "and a weights_feed",
        o.backup_workers, o.replicas.size());
  }
  for (size_t r = 0; r < o.replicas.size(); ++r) {
    if (o.replicas[r].loss.empty() || o.replicas[r].train_target.empty()) {
      return InvalidArgument("TrainLoop: replica {} needs a loss to fetch and a train target", r);
    }
  }
  RETURN_IF_ERROR(CheckNames(session.graph(), o));
  const bool tty = isatty(STDERR_FILENO);
  std::unique_ptr<Checkpointer> checkpointer;
  if (!o.checkpoint_dir.empty()) {
    if (o.checkpoint_every_steps <= 0 && o.checkpoint_every_seconds <= 0) {
      return InvalidArgument(
          "TrainLoop: checkpoint_dir '{}' needs checkpoint_every_steps or "
          "checkpoint_every_seconds",
          o.checkpoint_dir);
    }
    ASSIGN_OR_RETURN(checkpointer,
                     Checkpointer::Create({.dir = o.checkpoint_dir, .keep = o.checkpoint_keep}));
  }
  if (o.reconnect && !checkpointer) {
    return InvalidArgument("TrainLoop: recovery (reconnect) needs checkpoint_dir");
  }
  Session* current = &session;                                          // another after a recovery
  int64_t step = 0, saved_step = 0, checkpoints = 0, steps_redone = 0;  // over all epochs
  int recoveries = 0;
  // With recovery on, a checkpoint of the start: a worker lost before the first one can still
  // be recovered from.
  if (o.reconnect) RETURN_IF_ERROR(checkpointer->Save(*current, 0));
  auto last_save = Clock::now();
  // A lost worker (Unavailable, in a step or while taking a checkpoint) with reconnect set: a
  // new session with the newest checkpoint restored. Any other error ends the loop.
  auto recover = [&](const Status& why, const std::string& what) -> Status {
    const bool lost = why.code() == StatusCode::kUnavailable ||
                      (o.recover_on_deadline && why.code() == StatusCode::kDeadlineExceeded);
    if (!o.reconnect || !lost) return why;
    ASSIGN_OR_RETURN(int64_t back_to, Recover(why, what, step, o, *checkpointer, &current));
    steps_redone += step - back_to;
    step = saved_step = back_to;
    ++recoveries;
    return Status::OK();
  };
  auto checkpoint_due = [&](int64_t at) {
    return checkpointer && ((o.checkpoint_every_steps > 0 && at % o.checkpoint_every_steps == 0) ||
                            (o.checkpoint_every_seconds > 0 &&
                             std::chrono::duration<double>(Clock::now() - last_save).count() >=
                                 o.checkpoint_every_seconds));
  };
  auto checkpoint = [&](int64_t at) -> Status {
    RETURN_IF_ERROR(checkpointer->Save(*current, at));
    saved_step = at;
    last_save = Clock::now();
    ++checkpoints;
    return Status::OK();
  };
  std::vector<int64_t> clocks(o.replicas.size(), 0);  // asynchronous replicas' steps
  int64_t total = batches.batches_per_epoch();
  if (o.max_steps_per_epoch > 0) total = std::min(total, o.max_steps_per_epoch);
  bool rewound = false;  // a recovery went back to an earlier step: its epoch starts again
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    batches.StartEpoch(epoch - 1);
    EpochStats stats;
    stats.epoch = epoch;
    std::vector<double> step_ms;
    double loss_sum = 0;
    int64_t examples = 0, next_line = 0;
    auto start = Clock::now();
    Tensor images, labels;
    // After a recovery, the batches of this epoch that the restored checkpoint had seen are
    // passed over, so training sees the batches it would have without the failure.
    int64_t in_epoch = 0;  // batches of the epoch taken, passed over ones included
    for (const int64_t done = step - (epoch - 1) * total;
         in_epoch < done && batches.Next(&images, &labels);) {
      ++in_epoch;
    }
    if (!o.replicas.empty()) {
      ReplicaEpoch::Setup setup{.session = current,
                                .batches = &batches,
                                .options = &o,
                                .epoch = epoch,
                                .total = total,
                                .taken = in_epoch,
                                .step = step,
                                .clocks = &clocks,
                                .checkpoint_due = checkpoint_due,
                                .checkpoint = checkpoint};
      std::string what;
      Status failed;
      if (o.backup_workers > 0) {
        BackupEpoch backups(setup);
        failed = backups.Run(&what);
        backups.Fill(&stats, &loss_sum, &examples, &step_ms, &step);
      } else {
        AsyncEpoch async(setup);
        failed = async.Run(&what);
        async.Fill(&stats, &loss_sum, &examples, &step_ms, &step);
      }
      if (!failed.ok()) {
        RETURN_IF_ERROR(recover(failed, what));
        std::fill(clocks.begin(), clocks.end(), 0);
        rewound = true;
      }
    }
    while (o.replicas.empty() && in_epoch < total && batches.Next(&images, &labels)) {
      auto t0 = Clock::now();
      ASSIGN_OR_RETURN(Session::Feeds feeds, StepFeeds(o, images, labels));
      auto out = current->Run(feeds, {o.loss}, {o.train_target}, StepRunOptions(o));
      if (!out.ok()) {
        RETURN_IF_ERROR(recover(out.status(), fmt::format("step {}", step + 1)));
        rewound = true;
        break;
      }
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      const double loss = ScalarLoss(out->at(0));
      if (!std::isfinite(loss)) {
        return InvalidArgument("loss is {} at epoch {} step {}", loss, epoch, in_epoch + 1);
      }
      loss_sum += loss;
      examples += images.shape()[0];
      ++stats.steps;
      ++in_epoch;
      ++step;
      if (checkpoint_due(step)) {
        if (Status saved = checkpoint(step); !saved.ok()) {
          RETURN_IF_ERROR(recover(saved, fmt::format("the checkpoint of step {}", step)));
          rewound = true;
          break;
        }
      }
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      if (o.progress && (tty ? in_epoch % 10 == 0 || in_epoch == total : in_epoch >= next_line)) {
        DrawProgress(stats, o.epochs, in_epoch, total, loss_sum / stats.steps, secs, tty);
        next_line = in_epoch + std::max<int64_t>(1, total / 4);
      }
    }
    if (rewound) {
      // Again from the epoch of the restored step (the loop's ++ makes it that epoch).
      rewound = false;
      epoch = static_cast<int>(step / std::max<int64_t>(total, 1));
      continue;
    }
    if (o.progress && tty) std::fprintf(stderr, "\n");
    stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stats.mean_loss = stats.steps ? loss_sum / stats.steps : 0;
    stats.examples_per_second = stats.seconds > 0 ? examples / stats.seconds : 0;
    if (!step_ms.empty()) {
      std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
      stats.median_step_ms = step_ms[step_ms.size() / 2];
    }
    stats.checkpoints = checkpoints;
    stats.recoveries = recoveries;
    stats.steps_redone = steps_redone;
    if (on_epoch) RETURN_IF_ERROR(on_epoch(stats));
  }
  if (checkpointer) {
    if (saved_step != step) RETURN_IF_ERROR(checkpointer->Save(*current, step));
    RETURN_IF_ERROR(checkpointer->Flush());
  }
  return Status::OK();
}

Result<double> Accuracy(Session& session, const Dataset& data, const std::string& images_feed,
                        const std::string& logits, int64_t batch_size) {
  Batcher batches(data, batch_size, 0, /*shuffle=*/false, /*drop_last=*/false);
  Tensor images, labels;
  int64_t correct = 0, seen = 0;
  while (batches.Next(&images, &labels)) {
    ASSIGN_OR_RETURN(auto out, session.Run({{images_feed, images}}, {logits}));
    const Tensor& l = out[0];
    if (l.dtype() != DType::kF32 || l.shape().rank() != 2 || l.shape()[0] != images.shape()[0]) {
      return InvalidArgument("Accuracy: '{}' must be f32 [batch, classes], got {}{}", logits,
                             l.dtype(), l.shape());
    }
    int64_t classes = l.shape()[1];
    for (int64_t r = 0; r < l.shape()[0]; ++r) {
      const float* row = l.data<float>() + r * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      correct += best == labels.data<int32_t>()[r];
    }
    seen += l.shape()[0];
  }
  return seen ? static_cast<double>(correct) / seen : 0.0;
}

}  // namespace dflow
