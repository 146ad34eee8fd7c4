// Internal: walks the output of an N-input element-wise op with NumPy broadcasting.
#pragma once

#include <array>

#include "graph/shape.h"
#include "ops/broadcast.h"

namespace dflow::cpu {

template <int N>
using Strides = std::array<std::array<int64_t, Shape::kMaxRank>, N>;

// Strides of each input shape seen from `out`.
template <int N>
Strides<N> MakeStrides(const Shape& out, const std::array<const Shape*, N>& ins) {
  Strides<N> s{};
  for (int k = 0; k < N; ++k) BroadcastStrides(*ins[k], out, s[k].data());
  return s;
}

// Calls f(out_index, offsets) for every element of `out` in row-major order, where offsets[k]
// is the element of input k that broadcasts to it.
template <int N, typename F>
void BroadcastLoop(const Shape& out, const Strides<N>& strides, F&& f) {
  int rank = out.rank();
  int64_t n = out.num_elements();
  if (n == 0) return;
  std::array<int64_t, N> off{};
  if (rank == 0) {
    f(int64_t{0}, off);
    return;
  }
  int64_t inner = out[rank - 1];
  std::array<int64_t, N> step;
  for (int k = 0; k < N; ++k) step[k] = strides[k][rank - 1];
  std::array<int64_t, Shape::kMaxRank> idx{};
  for (int64_t base = 0; base < n; base += inner) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      f(base + i, o);
      for (int k = 0; k < N; ++k) o[k] += step[k];
    }
    for (int d = rank - 2; d >= 0; --d) {
      for (int k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[d] < out[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

// Like BroadcastLoop, a row (the last dimension) at a time: f(out_begin, length, offsets, steps),
// where input k's elements for the row start at offsets[k] and advance by steps[k] (0 when it
// is broadcast along the row). Lets callers write tight, vectorisable inner loops.
template <int N, typename F>
void BroadcastRows(const Shape& out, const Strides<N>& strides, F&& f) {
  int rank = out.rank();
  int64_t n = out.num_elements();
  if (n == 0) return;
  std::array<int64_t, N> off{}, step{};
  if (rank == 0) {
    f(int64_t{0}, int64_t{1}, off, step);
    return;
  }
  int64_t inner = out[rank - 1];
  for (int k = 0; k < N; ++k) step[k] = strides[k][rank - 1];
  std::array<int64_t, Shape::kMaxRank> idx{};
  for (int64_t base = 0; base < n; base += inner) {
    f(base, inner, off, step);
    for (int d = rank - 2; d >= 0; --d) {
      for (int k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[d] < out[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

}  // namespace dflow::cpu
