// What every rendezvous does when a tensor meets its Recv in host memory: checks it against
// what the Recv expects (CheckReceived) and hands it over, or fails the Recv with the reason.
#pragma once

#include <string_view>

#include "framework/rendezvous.h"

namespace dflow {

// Calls `done` once: with `tensor` when it passes CheckReceived and both it and the Recv's
// allocator are host memory; otherwise with the error (InvalidArgument naming both nodes, or
// Unimplemented for device memory: a device whose memory is its own sends and receives host
// tensors and copies them itself, ops/common/common_kernels.h).
void DeliverToRecv(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
                   const RecvArgs& args, const Rendezvous::DoneCallback& done);

}  // namespace dflow
