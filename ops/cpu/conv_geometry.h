// Internal: the sizes of one 2-D convolution or pooling, checked at run time, and a loop over
// every (input element, filter element, output element) triple that meets.
#pragma once

#include <vector>

#include "graph/tensor.h"

namespace dflow::cpu {

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // filter (kh, kw also the pooling window)
  int64_t oh, ow;      // output
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, groups;

  int64_t cg() const { return c / groups; }  // input channels per group
  int64_t og() const { return o / groups; }  // output channels per group

  // Calls f(x_index, w_index, y_index) for every tap of the convolution that lands inside the
  // input (padding contributes nothing).
  template <typename F>
  void ForEachTap(F&& f) const {
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t oc = 0; oc < o; ++oc) {
        int64_t g = oc / og();
        for (int64_t y = 0; y < oh; ++y) {
          for (int64_t x = 0; x < ow; ++x) {
            int64_t yi = ((b * o + oc) * oh + y) * ow + x;
            for (int64_t ic = 0; ic < cg(); ++ic) {
              int64_t ch = g * cg() + ic;
              for (int64_t i = 0; i < kh; ++i) {
                int64_t row = y * sh - pt + i * dh;
                if (row < 0 || row >= h) continue;
                for (int64_t j = 0; j < kw; ++j) {
                  int64_t col = x * sw - pl + j * dw;
                  if (col < 0 || col >= w) continue;
                  f(((b * c + ch) * h + row) * w + col, ((oc * cg() + ic) * kh + i) * kw + j, yi);
                }
              }
            }
          }
        }
      }
    }
  }
};

}  // namespace dflow::cpu
