// Placement pass 3a: chain merging, so that large graphs place fast and cheap nodes stay with
// the node they feed.
//
// A node whose outputs (data and control) all go to one consumer joins that consumer's group
// when it is cheap: its compute time on its fastest candidate is at most what sending its
// outputs over the cheapest link between two devices would cost. Splitting such a pair can save
// at most the node's own time and always pays the transfer. Repeated along a chain, a run of
// single-consumer nodes becomes one group. Two groups merge only when they share a candidate
// device (the merged group keeps the shared ones) and their variables fit the largest of those.
#pragma once

#include "placer/constraints.h"
#include "placer/cost_model.h"

namespace dflow {

// Merges groups of `constraints` in place; returns the number of merges.
// REQUIRES: constraints and costs built from `graph` and `devices`.
int MergeChains(const Graph& graph, const DeviceSet& devices, const CostModel& costs,
                Constraints* constraints);

}  // namespace dflow
