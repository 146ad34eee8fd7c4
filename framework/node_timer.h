// NodeTimer: times a run's nodes by a device's own clock. The host's clock around a node's
// Compute is right for a device that computes there (the CPU), and wrong for one that only
// queues the work (a GPU's kernels run on a stream after Compute returns: the host measures
// the queueing, microseconds for a convolution of milliseconds). Such a device gives a timer
// (Device::NewNodeTimer); the executor brackets each node's Compute with Begin and End on the
// thread that runs it and, after the run, calls Collect, which waits for the timed work.
#pragma once

#include <vector>

#include "graph/status.h"

namespace dflow {

class NodeTimer {
 public:
  virtual ~NodeTimer() = default;
  // Before and after the Compute of the node with graph id `node`, on the calling thread.
  // Thread-safe: a run's threads may time their nodes at once.
  virtual void Begin(int node) = 0;
  virtual void End(int node) = 0;
  // Waits until the timed work has run, then adds each node's seconds (between its Begin and
  // End on the device) to seconds[node]; `seconds` is indexed by graph id. Nodes timed twice add
  // twice. An error names the device and leaves `seconds` as it was.
  virtual Status Collect(std::vector<double>& seconds) = 0;
};

}  // namespace dflow
