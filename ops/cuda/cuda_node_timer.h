// CudaNodeTimer: a GPU's node timer (framework/node_timer.h). Begin and End record CUDA events
// on the device's compute stream around the kernels a node queues; Collect waits for the last
// and reads each node's elapsed time between its two events. All of a GPU's kernels go on its
// one compute stream in order, so the events bracket exactly the node's work (nodes queued at
// once by several threads interleave and are charged for each other's kernels).
#pragma once

#include <memory>
#include <string>

#include "framework/node_timer.h"
#include "ops/cuda/cuda_stream.h"

namespace dflow::cuda {

// A timer of nodes on GPU `ordinal`'s `stream`; `device` names it in errors.
std::unique_ptr<NodeTimer> NewCudaNodeTimer(int ordinal, CudaStream stream, std::string device);

}  // namespace dflow::cuda
