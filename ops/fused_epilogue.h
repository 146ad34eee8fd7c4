// The epilogue a node of a fused op applies (ops/defs/fused_defs.cc: _FusedMatMul, _FusedConv2D): a
// bias from input 2 and perhaps an activation (a ReLU, or for _FusedMatMul a GELU), as the fusion
// rewrites (rewrite/fusion.h, rewrite/subgraph_fusion.h) made it. A kernel that also runs the
// plain op (MatMul, Conv2D) finds none.
#pragma once

#include <string>
#include <variant>

#include "graph/graph.h"

namespace dflow {

struct FusedEpilogue {
  bool bias = false;
  bool relu = false;
  bool gelu = false;  // 0.5 x (1 + erf(x / sqrt 2)), as the Gelu op

  static FusedEpilogue Of(const Node& node) {
    FusedEpilogue e;
    const AttrValue* activation = node.FindAttr("activation");
    e.bias = activation != nullptr;  // only the fused ops carry it, with their bias input
    e.relu = e.bias && std::get<std::string>(*activation) == "Relu";
    e.gelu = e.bias && std::get<std::string>(*activation) == "Gelu";
    return e;
  }
};

}  // namespace dflow
