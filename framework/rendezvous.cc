#include "framework/rendezvous.h"

#include "graph/graph.h"

namespace dflow {

Status CheckReceived(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
                     const RecvArgs& args) {
  if (tensor.dtype() == args.dtype && args.shape.IsCompatibleWith(tensor.shape())) {
    return Status::OK();
  }
  return InvalidArgument("Recv '{}' expects {}{} but Send '{}' sent {}{} (rendezvous key {})",
                         args.node, DTypeName(args.dtype), args.shape, send_node,
                         DTypeName(tensor.dtype()), tensor.shape(), key.ToString());
}

RendezvousKey RendezvousKeyOf(const Node& node, int64_t step_id) {
  RendezvousKey k;
  k.src_device = std::get<std::string>(*node.FindAttr("send_device"));
  k.src_incarnation =
      static_cast<uint64_t>(std::get<int64_t>(*node.FindAttr("send_device_incarnation")));
  k.dst_device = std::get<std::string>(*node.FindAttr("recv_device"));
  k.tensor = std::get<std::string>(*node.FindAttr("tensor_name"));
  k.step_id = step_id;
  return k;
}

}  // namespace dflow
