// The partitioner: one subgraph per device, joined by Send/Recv pairs.
//
// Every data edge whose ends sit on different devices becomes a _Send on the producer's device
// and a _Recv on the consumer's, one pair per (tensor, destination device) however many nodes
// read it there. A control edge across devices becomes a pair carrying an empty tensor: an empty
// Const on the source device (waiting on the source node) feeds the _Send, and the consumer
// waits on the _Recv. Node names are kept; Send/Recv and their helpers get names under the
// producer's, e.g. "h/_send_0_to_cpu1".
//
// Partitioning is cheap and copies no node: a PartitionedGraph lists each device's nodes by
// their ids in the original graph, and the transfers (Send/Recv pairs) between devices.
// BuildPartitionGraph makes one device's graph from it when that device's plan is compiled,
// copying the nodes with what validation inferred instead of validating them again.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "placer/device_set.h"

namespace dflow {

// One Send/Recv pair.
struct Transfer {
  int producer;    // node id in the original graph
  int output;      // the producer's output; -1: a control edge, carried as an empty tensor
  int src_device;  // DeviceSet indices
  int dst_device;
};

struct GraphPartition {
  int device;              // index into the DeviceSet
  std::vector<int> nodes;  // the original graph's nodes placed there, ascending
};

struct PartitionedGraph {
  std::vector<GraphPartition> partitions;  // devices that hold at least one node, ascending
  std::vector<Transfer> transfers;         // in the order their first consumer was met
  std::vector<int> device_of;              // the placement partitioned, node id -> device
  int send_recv_pairs = 0;                 // transfers.size()
};

// `device_of` gives every node's device (Place's report). `include`, when given, limits the
// partitions to the nodes it marks (a run signature's pruned graph): their inputs must be
// included too. Each sending device's incarnation (DeviceSpec::incarnation) goes into the
// rendezvous keys, so a restarted device's keys differ. REQUIRES: graph validated.
Result<PartitionedGraph> PartitionGraph(const Graph& graph, const DeviceSet& devices,
                                        const std::vector<int>& device_of,
                                        const std::vector<bool>* include = nullptr);

// Partition `index` of `parts` as a validated graph of its own: its nodes (names, attributes,
// inferred dtypes and shapes kept; requested device set to its device; colocation cleared),
// inputs from other devices read from _Recv nodes, and the _Send nodes (with their empty-tensor
// Consts for control edges) feeding other devices.
Result<Graph> BuildPartitionGraph(const Graph& graph, const DeviceSet& devices,
                                  const PartitionedGraph& parts, int index);

}  // namespace dflow
