#include "ops/attention_dims.h"

namespace dflow {
namespace {

// The product of the dimensions after the second, -1 when one is unknown.
int64_t RowWidth(const Shape& s) {
  int64_t w = 1;
  for (int i = 2; i < s.rank(); ++i) {
    if (s[i] < 0) return -1;
    w *= s[i];
  }
  return w;
}

bool Match(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

}  // namespace

Result<AttentionAttrs> AttentionAttrsOf(const Node& node) {
  AttentionAttrs a;
  for (auto [name, field] : {std::pair{"heads", &a.heads},
                             {"head_dim", &a.head_dim},
                             {"value_dim", &a.value_dim},
                             {"q_col", &a.q_col},
                             {"k_col", &a.k_col},
                             {"v_col", &a.v_col}}) {
    ASSIGN_OR_RETURN(*field, node.GetAttr<int64_t>(name));
  }
  return a;
}

Result<AttentionDims> AttentionShapes(const Shape& q, const Shape& k, const Shape& v,
                                      const Shape& mask, const AttentionAttrs& a) {
  if (a.heads <= 0 || a.head_dim < 0 || a.value_dim < 0 || a.q_col < 0 || a.k_col < 0 ||
      a.v_col < 0) {
    return InvalidArgument(
        "heads {} (> 0), head_dim {}, value_dim {} and the columns {}, {}, {} (>= 0)", a.heads,
        a.head_dim, a.value_dim, a.q_col, a.k_col, a.v_col);
  }
  for (const Shape* s : {&q, &k, &v}) {
    if (s->unknown_rank() || s->rank() < 3) {
      return InvalidArgument("queries {}, keys {} and values {} need rank >= 3 ([B, S, ...])", q, k,
                             v);
    }
  }
  if (!Match(q[0], k[0]) || !Match(q[0], v[0]) || !Match(k[0], v[0]) || !Match(k[1], v[1])) {
    return InvalidArgument("queries {}, keys {} and values {} differ in batch or key count", q, k,
                           v);
  }
  AttentionDims d;
  d.batch = q[0] >= 0 ? q[0] : (k[0] >= 0 ? k[0] : v[0]);
  d.seq = q[1];
  d.keys = k[1] >= 0 ? k[1] : v[1];
  d.q_width = RowWidth(q);
  d.k_width = RowWidth(k);
  d.v_width = RowWidth(v);
  const struct {
    const char* what;
    int64_t col, width, row;
  } ranges[] = {{"queries", a.q_col, a.heads * a.head_dim, d.q_width},
                {"keys", a.k_col, a.heads * a.head_dim, d.k_width},
                {"values", a.v_col, a.heads * a.value_dim, d.v_width}};
  for (const auto& r : ranges) {
    if (r.row >= 0 && r.col + r.width > r.row) {
      return InvalidArgument("the {}' columns [{}, {}) are outside their rows of {} ({}, {}, {})",
                             r.what, r.col, r.col + r.width, r.row, q, k, v);
    }
  }
  const std::vector<int64_t> scores = {d.batch, a.heads, d.seq, d.keys};
  if (mask.unknown_rank() || mask.rank() > 4) {
    return InvalidArgument("mask {} does not broadcast to the scores [{}, {}, {}, {}]", mask,
                           d.batch, a.heads, d.seq, d.keys);
  }
  d.mask_dims.assign(4, 1);
  for (int i = 1; i <= mask.rank(); ++i) {
    const int64_t m = mask[mask.rank() - i], s = scores[4 - i];
    if (m != 1 && !Match(m, s)) {
      return InvalidArgument("mask {} does not broadcast to the scores [{}, {}, {}, {}]", mask,
                             d.batch, a.heads, d.seq, d.keys);
    }
    d.mask_dims[4 - i] = m;
  }
  d.out = Shape{d.batch, d.seq, a.heads, a.value_dim};
  return d;
}

}  // namespace dflow
