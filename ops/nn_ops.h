// Builder functions for softmax and the classification loss.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

// Over the last axis.
Output Softmax(const Scope& scope, Output logits);
Output LogSoftmax(const Scope& scope, Output logits);

struct SoftmaxCrossEntropy {
  Output loss;      // [N]: -log softmax(logits)[label]
  Output backprop;  // [N, C]: d loss / d logits
};
// logits [N, C] (f32 or f64), labels [N] (i32 or i64). A label outside [0, C) is an
// InvalidArgument at run time naming the node, the row and the label.
SoftmaxCrossEntropy SparseSoftmaxCrossEntropyWithLogits(const Scope& scope, Output logits,
                                                        Output labels);

}  // namespace dflow::ops
