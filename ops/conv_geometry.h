// The sizes of one 2-D convolution on NCHW / OIHW tensors, read from a node's attributes and
// checked against the input and filter shapes at run time; shared by every backend's Conv2D
// kernels. Also a loop over every (input element, filter element, output element) triple that
// meets, for reference loops.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace dflow {

// Conv2D's attributes (ops/conv_ops.h).
struct ConvAttrs {
  std::vector<int64_t> strides, pads, dilations;  // pads: top, left, bottom, right
  int64_t groups = 1;
};
ConvAttrs ReadConvAttrs(const Node& node);

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // filter (kh, kw also the pooling window)
  int64_t oh, ow;      // output
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, groups;

  bool operator==(const ConvGeometry&) const = default;

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

// The geometry of x [N, C, H, W] convolved with w [O, C / groups, KH, KW]; InvalidArgument
// naming both shapes when the ranks or channels disagree. An input smaller than the dilated
// window gives an empty output (oh = ow = 0).
Result<ConvGeometry> ConvGeometryOf(const ConvAttrs& attrs, const Shape& x, const Shape& w);

// Which product a convolution kernel computes: y from (x, w); dx from (dy, w, x's shape);
// dw from (x, dy, w's shape).
enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// A pass's geometry and the shape of its output.
struct ConvPassShapes {
  ConvGeometry g;
  Shape out;
};

// The geometry of pass `pass` given its three inputs' shapes (`in2`: the bias for the fused
// forward pass when `bias`, the shape input for the backward passes, unused otherwise), and
// its output's shape. InvalidArgument when the output gradient does not match the
// convolution's output or the bias does not hold one value per output channel.
Result<ConvPassShapes> ConvPassShapesOf(const ConvAttrs& attrs, ConvPass pass, bool bias,
                                        const Shape& in0, const Shape& in1, const Shape& in2);

}  // namespace dflow
