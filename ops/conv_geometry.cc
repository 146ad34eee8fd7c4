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

}  // namespace dflow
