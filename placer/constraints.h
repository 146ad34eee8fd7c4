// Placement pass 1: hard constraints and colocation groups.
//
// Nodes that must share a device form one group:
//   - nodes with the same colocation group (Scope::WithColocation);
//   - a Variable and the stateful ops that take it as an input (Assign, the optimizer updates),
//     which write it where it lives;
//   - a Const (no inputs, no device request, no colocation) and the one node that reads it: a
//     layer's weights stay with the layer rather than crossing to it at every step.
// Each group's candidate devices are those that every member allows:
//   - a requested device (full or partial, e.g. "cpu:1" or "gpu") must match;
//   - the member's op must have a kernel for the device's type;
//   - a node already placed (a stateful node from an earlier placement) stays where it is.
// A group left without candidates is a FailedPrecondition listing its members, their requested
// devices and the device types their kernels support. With soft placement a request that cannot
// be met is dropped instead, and the placement log says so.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "placer/device_set.h"

namespace dflow {

struct ConstraintOptions {
  bool soft_placement = false;
  // Nodes already placed, by name: canonical or short device names.
  std::map<std::string, std::string> already_placed;
};

struct ColocationGroup {
  std::vector<int> members;     // node ids, ascending
  std::vector<int> candidates;  // device indices, ascending; never empty
};

struct Constraints {
  std::vector<ColocationGroup> groups;
  std::vector<int> group_of;     // node id -> index into groups
  std::vector<std::string> log;  // one line per relaxed request
};

// REQUIRES: graph validated. InvalidArgument for a malformed device request (naming the node).
Result<Constraints> ApplyHardConstraints(const Graph& graph, const DeviceSet& devices,
                                         const ConstraintOptions& options = {});

}  // namespace dflow
