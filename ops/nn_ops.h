// Builder functions for softmax and the classification loss.
#pragma once

#include <cstdint>

#include "graph/scope.h"

namespace dflow::ops {

// Over the last axis.
Output Softmax(const Scope& scope, Output logits);
Output LogSoftmax(const Scope& scope, Output logits);

struct DropoutResult {
  Output y;     // x * mask
  Output mask;  // 0 where dropped, 1 / (1 - rate) where kept
};
// Zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate). The masks
// come from a counter-based generator keyed on (seed, run number, element), so a program that
// runs the same steps sees the same masks. Use it only in the training graph.
DropoutResult Dropout(const Scope& scope, Output x, double rate, uint64_t seed);

struct SoftmaxCrossEntropy {
  Output loss;      // [N]: -log softmax(logits)[label]
  Output backprop;  // [N, C]: d loss / d logits
};
// logits [N, C] (f32 or f64), labels [N] (i32 or i64). A label outside [0, C) is an
// InvalidArgument at run time naming the node, the row and the label.
SoftmaxCrossEntropy SparseSoftmaxCrossEntropyWithLogits(const Scope& scope, Output logits,
                                                        Output labels);

}  // namespace dflow::ops
