// _Send and _Recv: the pair the partitioner puts on each cross-device edge (partition/partition.h).
// Their attributes name the rendezvous key: tensor_name, send_device, send_device_incarnation
// and recv_device; the step id comes from the run.
#include "graph/graph.h"
#include "ops/defs/op_defs.h"

namespace dflow {

namespace ops::internal {
namespace {

std::vector<AttrDef> KeyAttrs() {
  return {{"T", AttrType::kDType, std::nullopt},
          {"tensor_name", AttrType::kString, std::nullopt},
          {"send_device", AttrType::kString, std::nullopt},
          {"send_device_incarnation", AttrType::kInt, int64_t{1}},
          {"recv_device", AttrType::kString, std::nullopt}};
}

}  // namespace

Status RegisterSendRecvOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "_Send",
                              .inputs = {{.name = "tensor", .type_attr = "T"}},
                              .attrs = KeyAttrs(),
                              .stateful = true,
                              .role = OpRole::kSend,
                              .shape_fn = [](InferenceContext&) { return Status::OK(); }}));
  std::vector<AttrDef> recv = KeyAttrs();
  recv.push_back({"shape", AttrType::kShape, std::nullopt});
  RETURN_IF_ERROR(r.Register({.name = "_Recv",
                              .outputs = {{.name = "tensor", .type_attr = "T"}},
                              .attrs = recv,
                              .stateful = true,
                              .role = OpRole::kRecv,
                              .shape_fn = [](InferenceContext& c) -> Status {
                                ASSIGN_OR_RETURN(Shape s, c.GetAttr<Shape>("shape"));
                                c.set_output(0, s);
                                return Status::OK();
                              }}));
  return Status::OK();
}

}  // namespace ops::internal
}  // namespace dflow
