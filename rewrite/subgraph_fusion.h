// Subgraph fusion: a graph rewrite that recognises what a model exported op by op spells out
// and puts back the one op (or fused op) that computes it, so it runs as one kernel instead of
// a pass over memory per op:
//
//   Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)        becomes  Gelu(x)
//   (x - mean) * Rsqrt(mean((x - mean)^2) + eps) * scale + bias, over the last axis
//                                                          becomes  _LayerNorm(x, scale, bias)
//   Add(Reshape(MatMul(a, b)), bias [N])                  becomes  Reshape(_FusedMatMul(a, b,
//   bias))
//
// (PyTorch's exports of GELU, LayerNorm before ONNX's own op, and Linear on more than two
// dimensions.) Only f32 subgraphs whose inner values nobody else reads fuse, on one requested
// device and colocation group; the fused node takes the name of the subgraph's last node. The
// session runs this pass before epilogue fusion (rewrite/fusion.h) on every plan it compiles.
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

struct SubgraphStats {
  int gelu = 0;
  int layer_norm = 0;
  int matmul_bias = 0;  // biases moved before a Reshape into the MatMul
};

struct SubgraphFused {
  Graph graph;
  SubgraphStats stats;
};

// A rewritten, validated copy of validated `graph`. Nodes in `keep` keep their own outputs.
// `has_kernel`, when given, says whether the device has a kernel for an op ("_LayerNorm");
// rewrites to ops it lacks are left out.
Result<SubgraphFused> FuseSubgraphs(const Graph& graph, const std::vector<int>& keep,
                                    const std::function<bool(const char* op)>& has_kernel = {});

}  // namespace dflow::ops
