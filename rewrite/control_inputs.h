// What the fusing rewrites share: a fused node waits on everything the nodes it replaces waited
// on.
#pragma once

#include <algorithm>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

// Adds the control inputs of nodes `ids` of `g` (negative ids skipped) to `def`, each once.
inline void MergeControlInputs(const Graph& g, const std::vector<int>& ids, NodeDef* def) {
  for (int id : ids) {
    if (id < 0) continue;
    for (const auto& ctl : g.node(id).def().control_inputs) {
      if (std::find(def->control_inputs.begin(), def->control_inputs.end(), ctl) ==
          def->control_inputs.end()) {
        def->control_inputs.push_back(ctl);
      }
    }
  }
}

}  // namespace dflow::ops
