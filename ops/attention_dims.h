// The shapes of _Attention (the fused self-attention the subgraph rewrite makes, rewrite/
// subgraph_fusion.h), shared by its shape function and its kernels.
//
// Queries q [B, S, ...], keys k [B, Sk, ...] and values v [B, Sk, ...] are rows of width Wq, Wk
// and Wv (the product of their dimensions after the second). Head h's query is the head_dim
// columns from q_col + h * head_dim of a query row, its key likewise from k_col, its value the
// value_dim columns from v_col + h * value_dim: q, k and v may be one tensor (a projection's
// [B, S, 3 * H] output) read at three offsets. The mask broadcasts to the scores
// [B, heads, S, Sk]; the output is [B, S, heads, value_dim].
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "graph/shape.h"
#include "graph/status.h"

namespace dflow {

struct AttentionAttrs {
  int64_t heads = 0, head_dim = 0, value_dim = 0;
  int64_t q_col = 0, k_col = 0, v_col = 0;
};

// The node's attributes heads, head_dim, value_dim, q_col, k_col and v_col; InvalidArgument
// naming the node when one is missing or not an int.
Result<AttentionAttrs> AttentionAttrsOf(const Node& node);

struct AttentionDims {
  int64_t batch = 0, seq = 0, keys = 0;  // B, S, Sk
  int64_t q_width = 0, k_width = 0, v_width = 0;
  // The mask's dimensions as the scores' [B, heads, S, Sk], 1 where it broadcasts.
  std::vector<int64_t> mask_dims;
  Shape out;  // [B, S, heads, value_dim]
};

// InvalidArgument naming the shapes when a rank, a batch, a key count or a column range
// disagrees, or the mask does not broadcast to the scores. Unknown dimensions (-1) pass where
// they could match; the dims then hold -1 there.
Result<AttentionDims> AttentionShapes(const Shape& q, const Shape& k, const Shape& v,
                                      const Shape& mask, const AttentionAttrs& attrs);

}  // namespace dflow
