// The epilogue a node of a fused op applies (ops/defs/fused_defs.cc: _FusedMatMul, _FusedConv2D): a
// bias from input 2 and perhaps an activation, as the fusion rewrite (rewrite/fusion.h) made it.
// A kernel that also runs the plain op (MatMul, Conv2D) finds none.
#pragma once

#include <string>
#include <variant>

#include "graph/graph.h"

namespace dflow {

struct FusedEpilogue {
  bool bias = false;
  bool relu = false;

  static FusedEpilogue Of(const Node& node) {
    FusedEpilogue e;
    const AttrValue* activation = node.FindAttr("activation");
    e.bias = activation != nullptr;  // only the fused ops carry it, with their bias input
    e.relu = e.bias && std::get<std::string>(*activation) == "Relu";
    return e;
  }
};

}  // namespace dflow
