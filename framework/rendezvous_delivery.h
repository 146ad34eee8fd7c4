// What every rendezvous does when a tensor meets its Recv in host memory: checks it against
// what the Recv expects (CheckReceived) and hands it over, or fails the Recv with the reason.
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

}  // namespace dflow
