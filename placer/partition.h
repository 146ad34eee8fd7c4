// The partitioner: one subgraph per device, joined by Send/Recv pairs.
//
// Every data edge whose ends sit on different devices becomes a _Send on the producer's device
// and a _Recv on the consumer's, one pair per (tensor, destination device) however many nodes
// read it there. A control edge across devices becomes a pair carrying an empty tensor: an empty
// Const on the source device (waiting on the source node) feeds the _Send, and the consumer
// waits on the _Recv. Node names are kept; Send/Recv and their helpers get names under the
// producer's, e.g. "h/_send_0_to_cpu1".
#pragma once

#include <vector>

#include "graph/graph.h"
#include "placer/device_set.h"

namespace dflow {

struct GraphPartition {
  int device;   // index into the DeviceSet
  Graph graph;  // validated
};

struct PartitionedGraph {
  std::vector<GraphPartition> partitions;  // devices that hold at least one node, ascending
  int send_recv_pairs = 0;
};

// `device_of` gives every node's device (Place's report). Each sending device's incarnation
// (DeviceSpec::incarnation) goes into the rendezvous keys, so a restarted device's keys differ.
Result<PartitionedGraph> PartitionGraph(const Graph& graph, const DeviceSet& devices,
                                        const std::vector<int>& device_of);

}  // namespace dflow
