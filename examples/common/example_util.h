// Helpers shared by the examples: a trainable layer's variables and the error exit.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ops/initializers.h"
#include "runtime/trainer.h"

namespace dflow::examples {

// The variables of one layer and their initialisers.
struct Params {
  std::vector<ops::VariableAndInit> vars;

  Output Add(const Scope& scope, const Shape& shape, const ops::Initializer& init) {
    vars.push_back(ops::InitializedVariable(scope, shape, init));
    return vars.back().var;
  }
  std::vector<Output> variables() const {
    std::vector<Output> v;
    for (const auto& p : vars) v.push_back(p.var);
    return v;
  }
  std::vector<std::string> init_targets() const {
    std::vector<std::string> t;
    for (const auto& p : vars) t.push_back(p.init.node_name());
    return t;
  }
};

inline int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

struct TrainReport {
  int epochs;
  int64_t batch_size;
  int64_t max_steps;  // per epoch; <= 0: whole epochs
  uint64_t seed;
  double min_accuracy;
  std::string loss, train_target, logits;  // names in the session's graph
};

// Trains on `train`, printing loss, test accuracy and speed after every epoch; returns the exit
// status: 1 on an error or when the final test accuracy is below r.min_accuracy.
inline int TrainAndReport(Session& session, const Dataset& train, const Dataset& test,
                          const TrainReport& r) {
  Batcher batches(train, r.batch_size, r.seed);
  double accuracy = 0;
  Status s = TrainLoop(session, batches,
                       {.epochs = r.epochs,
                        .loss = r.loss,
                        .train_target = r.train_target,
                        .max_steps_per_epoch = r.max_steps},
                       [&](const EpochStats& e) -> Status {
                         ASSIGN_OR_RETURN(accuracy, Accuracy(session, test, "x", r.logits));
                         std::printf(
                             "epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, "
                             "%.0f examples/s, median step %.2f ms\n",
                             e.epoch, e.mean_loss, 100 * accuracy, e.seconds, e.examples_per_second,
                             e.median_step_ms);
                         std::fflush(stdout);
                         return Status::OK();
                       });
  if (!s.ok()) return Fail(s);
  if (accuracy < r.min_accuracy) {
    std::fprintf(stderr, "error: test accuracy %.2f%% is below the required %.2f%%\n",
                 100 * accuracy, 100 * r.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace dflow::examples
