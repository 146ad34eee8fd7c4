// Builder functions for the variable update ops used by optimizers.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

// variable -= learning_rate * grad, in place; outputs the new value. `variable` must be a
// Variable's output; learning_rate a scalar of its dtype.
Output ApplySGD(const Scope& scope, Output variable, Output learning_rate, Output grad);

}  // namespace dflow::ops
