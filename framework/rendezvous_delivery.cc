#include "framework/rendezvous_delivery.h"

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

}  // namespace dflow
