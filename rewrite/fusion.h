// Epilogue fusion: a graph rewrite that folds a bias and a ReLU into the matrix multiply or
// convolution feeding them, so oneDNN applies them as post-ops while the output is still in
// cache instead of two more passes over memory:
//
//   MatMul -> BiasAdd [-> Relu]                 becomes  _FusedMatMul(a, b, bias)
//   Conv2D -> Add(bias [C,1,1] or [1,C,1,1]) [-> Relu]  becomes  _FusedConv2D(x, w, bias)
//   ApplySGD(var, lr, MatMul(a, b))            becomes  _MatMulApplySGD(var, lr, a, b)
//   Add(x, MatMul(a, b)), x of the sum's shape  becomes  _MatMulAdd(x, a, b)
//
// The last two are prologues rather than epilogues: the weight gradient of a dense layer is
// accumulated straight into the variable (var += -lr * a b, oneDNN's sum post-op), so the
// gradient tensor never exists; a product added to a tensor (a pipeline's running sum of
// micro-batch gradients, rewrite/pipeline.h) is added into that tensor's buffer.
//
//   MaxPool(x) + MaxPoolGrad(x, dy) [+ ReluGrad(that, x)]
//       becomes  _MaxPoolWithArgmax(x) -> (y, argmax) + _MaxPoolGradWithArgmax(dy, argmax [, y])
//
// The forward pool records where each maximum came from, so the backward pass no longer reads
// x, and a ReluGrad on the pool's input becomes a mask on y > 0 (the gradient reaches only the
// maxima, where x equals y): x, often the largest activation, is freed after the forward pool.
//
// Only f32 chains on one requested device and colocation group fuse, and only through outputs
// nobody else reads. The fused node takes the name of the chain's last node, so consumers and
// fetches of that node see the same tensor. The session runs this pass on every plan it compiles
// (SessionOptions::fuse_epilogues); the user's graph is never changed.
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

struct FusionStats {
  int matmul = 0;      // MatMul + BiasAdd chains fused
  int conv = 0;        // Conv2D + bias chains fused
  int relu = 0;        // of those, chains that also took a ReLU
  int sgd = 0;         // weight gradients (MatMul) folded into their ApplySGD
  int accumulate = 0;  // MatMuls folded into the Add that reads them
  int pool = 0;        // MaxPool/MaxPoolGrad pairs that keep the argmax instead of the input
  int pool_relu = 0;   // of those, the ones that also took the ReluGrad below them
};

struct FusedGraph {
  Graph graph;
  FusionStats stats;
};

// A rewritten, validated copy of validated `graph`. Nodes in `keep` (the plan's fed, fetched and
// target nodes) keep their own outputs and are never folded into another node. Node names other
// than the folded ones are unchanged. `has_kernel`, when given, says whether the device that
// runs the graph has a kernel for a fused op ("_FusedMatMul", ...); rewrites to ops it lacks
// are left out.
Result<FusedGraph> FuseEpilogues(const Graph& graph, const std::vector<int>& keep,
                                 const std::function<bool(const char* op)>& has_kernel = {});

}  // namespace dflow::ops
