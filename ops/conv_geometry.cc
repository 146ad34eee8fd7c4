#include "ops/conv_geometry.h"

#include <algorithm>

namespace dflow {

ConvAttrs ReadConvAttrs(const Node& n) {
  return {std::get<std::vector<int64_t>>(*n.FindAttr("strides")),
          std::get<std::vector<int64_t>>(*n.FindAttr("pads")),
          std::get<std::vector<int64_t>>(*n.FindAttr("dilations")),
          std::get<int64_t>(*n.FindAttr("groups"))};
}

Result<ConvGeometry> ConvGeometryOf(const ConvAttrs& a, const Shape& x, const Shape& w) {
  if (x.rank() != 4 || w.rank() != 4) {
    return InvalidArgument("input {} and filter {} must both have rank 4", x, w);
  }
  ConvGeometry g{x[0],      x[1],      x[2],      x[3],           w[0],           w[2],
                 w[3],      0,         0,         a.strides[0],   a.strides[1],   a.pads[0],
                 a.pads[1], a.pads[2], a.pads[3], a.dilations[0], a.dilations[1], a.groups};
  if (g.o % g.groups != 0 || g.c != w[1] * g.groups) {
    return InvalidArgument("input {} and filter {} do not match with {} groups", x, w, g.groups);
  }
  int64_t span_h = (g.kh - 1) * g.dh + 1, span_w = (g.kw - 1) * g.dw + 1;
  g.oh = std::max<int64_t>(0, (g.h + g.pt + g.pb - span_h) / g.sh + 1);
  g.ow = std::max<int64_t>(0, (g.w + g.pl + g.pr - span_w) / g.sw + 1);
  if (g.h + g.pt + g.pb < span_h || g.w + g.pl + g.pr < span_w) g.oh = g.ow = 0;
  return g;
}

Result<ConvPassShapes> ConvPassShapesOf(const ConvAttrs& attrs, ConvPass pass, bool bias,
                                        const Shape& in0, const Shape& in1, const Shape& in2) {
  const Shape& x_shape = pass == ConvPass::kBackwardData ? in2 : in0;
  const Shape& w_shape = pass == ConvPass::kBackwardFilter ? in2 : in1;
  ASSIGN_OR_RETURN(ConvGeometry g, ConvGeometryOf(attrs, x_shape, w_shape));
  Shape y_shape{g.n, g.o, g.oh, g.ow};
  const Shape& dy_shape = pass == ConvPass::kBackwardData ? in0 : in1;
  if (pass != ConvPass::kForward && dy_shape != y_shape) {
    return InvalidArgument("output gradient {} does not match the convolution's output {}",
                           dy_shape, y_shape);
  }
  if (pass == ConvPass::kForward && bias && in2.num_elements() != g.o) {
    return InvalidArgument("bias {} does not have one value per output channel ({})", in2, g.o);
  }
  Shape out = pass == ConvPass::kForward        ? y_shape
              : pass == ConvPass::kBackwardData ? x_shape
                                                : w_shape;
  return ConvPassShapes{g, std::move(out)};
}

}  // namespace dflow
