#include "ops/logic_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

namespace {
Output Compare(const char* op, const Scope& scope, Output a, Output b) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(op, {a, b}, {}));
}
}  // namespace

Output Equal(const Scope& s, Output a, Output b) { return Compare("Equal", s, a, b); }
Output NotEqual(const Scope& s, Output a, Output b) { return Compare("NotEqual", s, a, b); }
Output Less(const Scope& s, Output a, Output b) { return Compare("Less", s, a, b); }
Output LessEqual(const Scope& s, Output a, Output b) { return Compare("LessEqual", s, a, b); }
Output Greater(const Scope& s, Output a, Output b) { return Compare("Greater", s, a, b); }
Output GreaterEqual(const Scope& s, Output a, Output b) { return Compare("GreaterEqual", s, a, b); }

Output Select(const Scope& scope, Output cond, Output a, Output b) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Select", {cond, a, b}, {}));
}

}  // namespace dflow::ops
