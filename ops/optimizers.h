// Optimizers: objects that add the update ops for a list of variables.
//
//   ops::Adam adam({.learning_rate = 1e-3});
//   auto train = adam.Minimize(root, loss, {w1, b1, w2, b2});  // a NoOp target to run per step
//   session->Run({}, {}, adam.init_targets());                  // once: zero the slot variables
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/scope.h"
#include "ops/array_ops.h"

namespace dflow::ops {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Adds the gradients of `loss` with respect to `vars` (Variable outputs) and one update per
  // variable; returns a NoOp depending on all updates. Errors are recorded in the scope.
  Operation Minimize(const Scope& scope, Output loss, const std::vector<Output>& vars);
  // Node names that initialise the optimizer's own variables (moments, step counters); run once
  // after Minimize and before the first step.
  const std::vector<std::string>& init_targets() const { return init_targets_; }

 protected:
  // Adds the update of one variable given its gradient.
  virtual Output Update(const Scope& scope, Output var, Output grad) = 0;
  // A zero-initialised variable like `var` (a slot such as a moment), named var/<name>.
  Output Slot(const Scope& scope, Output var, const std::string& name, const Shape& shape,
              DType dtype);

 private:
  std::vector<std::string> init_targets_;
};

class SGD : public Optimizer {
 public:
  struct Options {
    double learning_rate = 0.01;
  };
  explicit SGD(Options o) : o_(o) {}

 protected:
  Output Update(const Scope& scope, Output var, Output grad) override;

 private:
  Options o_;
};

class Momentum : public Optimizer {
 public:
  struct Options {
    double learning_rate = 0.01;
    double momentum = 0.9;
    bool nesterov = false;
  };
  explicit Momentum(Options o) : o_(o) {}

 protected:
  Output Update(const Scope& scope, Output var, Output grad) override;

 private:
  Options o_;
};

// Adam with bias correction; weight_decay > 0 gives AdamW (decoupled weight decay).
class Adam : public Optimizer {
 public:
  struct Options {
    double learning_rate = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double epsilon = 1e-8;
    double weight_decay = 0;
  };
  explicit Adam(Options o) : o_(o) {}

 protected:
  Output Update(const Scope& scope, Output var, Output grad) override;

 private:
  Options o_;
};

}  // namespace dflow::ops
