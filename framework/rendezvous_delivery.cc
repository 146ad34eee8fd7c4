#include "framework/rendezvous_delivery.h"

#include <fmt/format.h>

#include <cstring>

namespace dflow {

void DeliverToRecv(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
                   const RecvArgs& args, const Rendezvous::DoneCallback& done) {
  Status s = CheckReceived(key, send_node, tensor, args);
  if (s.ok() && !tensor.host_accessible() && !args.accepts_device_memory) {
    s = Unimplemented("Recv '{}' takes host memory only, not {} memory", args.node,
                      tensor.device());
  } else if (s.ok() && tensor.host_accessible() && args.allocator != nullptr &&
             !args.allocator->host_accessible() && !args.accepts_device_memory) {
    s = Unimplemented("Recv '{}': no copy from host memory to {} memory", args.node,
                      args.allocator->device());
  }
  done(s, s.ok() ? tensor : Tensor());
}

Result<Tensor> AllocateForRecv(const RendezvousKey& key, const RecvArgs& args, DType dtype,
                               const Shape& shape) {
  Allocator* allocator = args.allocator != nullptr && args.allocator->host_accessible()
                             ? args.allocator
                             : CpuAllocator::Default();
  auto t = Tensor::Allocate(allocator, dtype, shape);
  if (!t.ok()) {
    return t.status().WithPrefix(fmt::format("Recv '{}' of {}: ", args.node, key.ToString()));
  }
  return t;
}

Result<Tensor> IntoRecvMemory(const RendezvousKey& key, const RecvArgs& args,
                              const Tensor& tensor) {
  if (!tensor.host_accessible() || args.allocator == nullptr ||
      !args.allocator->host_accessible() || args.allocator == tensor.allocator()) {
    return tensor;
  }
  ASSIGN_OR_RETURN(Tensor copy, AllocateForRecv(key, args, tensor.dtype(), tensor.shape()));
  if (tensor.num_bytes() > 0) std::memcpy(copy.raw_data(), tensor.raw_data(), tensor.num_bytes());
  return copy;
}

}  // namespace dflow
