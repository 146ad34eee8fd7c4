#include "ops/nn_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

DropoutResult Dropout(const Scope& scope, Output x, double rate, uint64_t seed) {
  internal::RegisterOpDefinitions();
  int id = scope.AddNode("Dropout", {x}, {{"rate", rate}, {"seed", static_cast<int64_t>(seed)}});
  return {scope.OutputOf(id, 0), scope.OutputOf(id, 1)};
}

Output Softmax(const Scope& scope, Output logits) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Softmax", {logits}, {}));
}

Output LogSoftmax(const Scope& scope, Output logits) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("LogSoftmax", {logits}, {}));
}

SoftmaxCrossEntropy SparseSoftmaxCrossEntropyWithLogits(const Scope& scope, Output logits,
                                                        Output labels) {
  internal::RegisterOpDefinitions();
  int id = scope.AddNode("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {});
  return {scope.OutputOf(id, 0), scope.OutputOf(id, 1)};
}

}  // namespace dflow::ops
