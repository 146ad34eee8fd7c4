// Subgraph fusion: a graph rewrite that recognises what a model exported op by op spells out
// and puts back the one op (or fused op) that computes it, so it runs as one kernel instead of
// a pass over memory per op:
//
//   Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)        becomes  Gelu(x)
//   (x - mean) * Rsqrt(mean((x - mean)^2) + eps) * scale + bias, over the last axis
//                                                          becomes  _LayerNorm(x, scale, bias)
//   Add(Reshape(MatMul(a, b)), bias [N])                  becomes  Reshape(_FusedMatMul(a, b,
//   bias))
//   Gelu(Reshape(_FusedMatMul(a, b, bias)))                becomes  Reshape(_FusedMatMul(a, b,
//   bias) with the GELU as its activation)
//   BatchMatMul(Transpose(x, perm)) whose perm moves the last axis into the second last
//                                     becomes  BatchMatMul(Transpose(x, perm with its last two
//                                              swapped) or x itself, transposed in the product)
//   Add(Div(BatchMatMul(a, b), c), m), c a scalar    becomes  _ScaledBatchMatMul(a, b, m, 1/c)
//   (and Mul by c), m broadcast to the product       (an attention's scores and mask)
//   Transpose(BatchMatMul(Softmax(_ScaledBatchMatMul(   becomes  _Attention(q, k, v, m): the
//     Transpose(q), Transpose(k), m)), Transpose(v)))           heads read in place, from the
//   over q, k, v [B, S, heads, dim], every perm                 projection q, k and v were
//   [0, 2, 1, 3] (a second pass, on the first's graph)           sliced from where they were
//
// (PyTorch's exports of GELU, LayerNorm before ONNX's own op, Linear on more than two
// dimensions, and attention's keys transposed for the product.) Only f32 subgraphs whose inner
// values nobody else reads fuse, on one requested device and colocation group; the fused node takes
// the name of the subgraph's last node. The session runs this pass before epilogue fusion
// (rewrite/fusion.h) on every plan it compiles.
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

struct SubgraphStats {
  int gelu = 0;
  int layer_norm = 0;
  int matmul_bias = 0;  // biases moved before a Reshape into the MatMul
  int matmul_gelu = 0;  // GELUs (also counted in `gelu`) taken into the _FusedMatMul before them
  int transposed_operands = 0;  // Transposes before a BatchMatMul that now keep the last axis
  int scaled_matmuls = 0;       // _ScaledBatchMatMul
  int attention = 0;            // _Attention
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
