// Builder functions for the variable update ops used by optimizers.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

// variable -= learning_rate * grad; outputs the new value. `variable` must be a Variable's
// output; learning_rate a scalar of its dtype. Updates happen in place unless another reader
// holds the value (then into a fresh buffer, so that reader's snapshot stays intact).
Output ApplySGD(const Scope& scope, Output variable, Output learning_rate, Output grad);

// accum = momentum * accum + grad; variable -= lr * accum, or with Nesterov
// variable -= lr * (grad + momentum * accum). `accum` is a Variable like `variable`.
Output ApplyMomentum(const Scope& scope, Output variable, Output accum, Output learning_rate,
                     Output grad, double momentum, bool nesterov = false);

struct AdamAttrs {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0;  // > 0: AdamW, variable -= lr * weight_decay * variable first
};
// Adam with bias correction: step (an i64 scalar Variable) is incremented, then m and v (Variables
// like `variable`) and the variable are updated.
Output ApplyAdam(const Scope& scope, Output variable, Output m, Output v, Output step,
                 Output learning_rate, Output grad, const AdamAttrs& attrs = {});

}  // namespace dflow::ops
