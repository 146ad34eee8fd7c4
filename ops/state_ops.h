// Builder functions for state: Variable (a value kept across runs) and Assign.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

// A variable of fixed dtype and fully defined shape, named by its node. Reading it before any
// Assign ran is a FailedPrecondition naming the variable.
Output Variable(const Scope& scope, const Shape& shape, DType dtype = DType::kF32);

struct AssignAttrs {
  bool validate_shape = true;  // false: the variable takes the value's shape
};
// Stores `value` into `variable` (which must be a Variable's output); outputs the new value.
Output Assign(const Scope& scope, Output variable, Output value, const AssignAttrs& attrs = {});

}  // namespace dflow::ops
