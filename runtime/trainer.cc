#include "runtime/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "runtime/checkpointer.h"

namespace dflow {
namespace {

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

}  // namespace

Status TrainLoop(Session& session, Batcher& batches, const TrainLoopOptions& o,
                 const std::function<Status(const EpochStats&)>& on_epoch) {
  if (o.loss.empty() || o.train_target.empty()) {
    return InvalidArgument("TrainLoop needs a loss to fetch and a train target");
  }
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
    if (!o.reconnect || why.code() != StatusCode::kUnavailable) return why;
    ASSIGN_OR_RETURN(int64_t back_to, Recover(why, what, step, o, *checkpointer, &current));
    steps_redone += step - back_to;
    step = saved_step = back_to;
    ++recoveries;
    return Status::OK();
  };
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
    while (in_epoch < total && batches.Next(&images, &labels)) {
      auto t0 = Clock::now();
      auto out = current->Run({{o.images_feed, images}, {o.labels_feed, labels}}, {o.loss},
                              {o.train_target});
      if (!out.ok()) {
        RETURN_IF_ERROR(recover(out.status(), fmt::format("step {}", step + 1)));
        rewound = true;
        break;
      }
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      double loss = out->at(0).dtype() == DType::kF64 ? out->at(0).data<double>()[0]
                                                      : out->at(0).data<float>()[0];
      if (!std::isfinite(loss)) {
        return InvalidArgument("loss is {} at epoch {} step {}", loss, epoch, in_epoch + 1);
      }
      loss_sum += loss;
      examples += images.shape()[0];
      ++stats.steps;
      ++in_epoch;
      ++step;
      if (checkpointer && ((o.checkpoint_every_steps > 0 && step % o.checkpoint_every_steps == 0) ||
                           (o.checkpoint_every_seconds > 0 &&
                            std::chrono::duration<double>(Clock::now() - last_save).count() >=
                                o.checkpoint_every_seconds))) {
        if (Status saved = checkpointer->Save(*current, step); !saved.ok()) {
          RETURN_IF_ERROR(recover(saved, fmt::format("the checkpoint of step {}", step)));
          rewound = true;
          break;
        } else {
          saved_step = step;
          last_save = Clock::now();
          ++checkpoints;
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
