// AllReduce as graph nodes: every replica's tensor summed (or averaged), the result on every
// replica's device. The builder adds ordinary ops (Reshape, Split, Add, Identity, Concat) pinned
// to the replicas' devices, so every edge between two of them becomes a Send/Recv pair when the
// graph is partitioned: the same nodes work between in-process devices, worker processes and
// hosts, and the executor overlaps them with whatever else is ready.
//
// The ring algorithm, as NCCL and Horovod run it: each replica's tensor is flattened and cut
// into n segments (n replicas). In n-1 reduce-scatter steps every replica passes a running sum
// to the next one round the ring, which adds its own piece; replica r then holds the total of
// segment r+1 (mod n). In n-1 all-gather steps the totals go round the ring. Every replica sends
// and receives 2(n-1)/n of the tensor, however many replicas there are. Chunking cuts each
// segment further: the chunks go round the ring independently, so one chunk is summed while the
// next is on its way.
//
// Across hosts (AllReduceOptions::hosts), each host first sums its replicas' tensors on its first
// replica's device, those leaders run the ring between hosts, and each leader hands the result
// to its host's other replicas, as Horovod's hierarchical all-reduce does: the slow links
// between hosts carry one ring's traffic, not one per replica.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

enum class Reduction { kSum, kMean };

struct AllReduceOptions {
  Reduction reduction = Reduction::kSum;
  // Each segment is cut into chunks of at most about this many bytes (0: one chunk a segment).
  int64_t chunk_bytes = 0;
  // The host of each value's device (empty: all on one). With replicas on two or more hosts and
  // more than one on some host, the reduction goes through one leader per host.
  std::vector<std::string> hosts;
};

// The reduction of `values` (one per replica, values[i] read on devices[i]), returned once per
// replica: out[i] on devices[i], with the values' shape. The values must share their dtype and a
// fully known shape; kMean needs a floating-point dtype. A tensor with fewer elements than
// replicas is summed on devices[0] and sent back instead of going round the ring. Errors go to
// the scope's status (and nothing is returned): no values, a device list of another length,
// values that differ in dtype or shape (naming both), an unknown dimension, hosts of another
// length.
std::vector<Output> AllReduce(const Scope& scope, const std::vector<Output>& values,
                              const std::vector<std::string>& devices,
                              const AllReduceOptions& options = {});

}  // namespace dflow::ops
