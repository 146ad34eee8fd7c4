// What every rendezvous does when a tensor meets its Recv in host memory: checks it against
// what the Recv expects (CheckReceived) and hands it over, or fails the Recv with the reason;
// and where a tensor from another process is put for its Recv.
#pragma once

#include <string_view>

#include "framework/rendezvous.h"

namespace dflow {

// Calls `done` once: with `tensor` when it passes CheckReceived and the Recv can take it (host
// memory into a host allocator, or anything when the Recv copies it in itself:
// RecvArgs::accepts_device_memory); otherwise with the error (InvalidArgument naming both
// nodes, or Unimplemented naming the Recv and the memory).
void DeliverToRecv(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
                   const RecvArgs& args, const Rendezvous::DoneCallback& done);

// Memory for a tensor received from another process: the Recv's allocator when it has host
// memory (a CPU device's, under that device's limit), else host memory (the Recv copies to its
// device itself). Never another allocator when the Recv's has no room: ResourceExhausted naming
// the Recv, the key and the device, so a received tensor never slips past a device's limit.
Result<Tensor> AllocateForRecv(const RendezvousKey& key, const RecvArgs& args, DType dtype,
                               const Shape& shape);

// `tensor` (received, in host memory) where its Recv's memory is: itself when it is there
// already, or in device memory, or the Recv names no host allocator; else a copy made by
// AllocateForRecv (a tensor that arrived before its Recv waited in host memory).
Result<Tensor> IntoRecvMemory(const RendezvousKey& key, const RecvArgs& args, const Tensor& tensor);

}  // namespace dflow
