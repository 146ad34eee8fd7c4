// Builder functions for comparisons (bool results, NumPy broadcasting) and Select. Comparisons
// have no gradient; Select passes gradients to the branch each element came from.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

Output Equal(const Scope& scope, Output a, Output b);
Output NotEqual(const Scope& scope, Output a, Output b);
Output Less(const Scope& scope, Output a, Output b);
Output LessEqual(const Scope& scope, Output a, Output b);
Output Greater(const Scope& scope, Output a, Output b);
Output GreaterEqual(const Scope& scope, Output a, Output b);
// cond ? a : b element-wise; the three broadcast together.
Output Select(const Scope& scope, Output cond, Output a, Output b);

}  // namespace dflow::ops
