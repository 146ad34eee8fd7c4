#include "placer/partition.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace dflow {
namespace {

std::string Compact(std::string s) {  // "cpu:1" -> "cpu1" for node names
  s.erase(std::remove(s.begin(), s.end(), ':'), s.end());
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

}  // namespace

Result<PartitionedGraph> PartitionGraph(const Graph& graph, const DeviceSet& devices,
                                        const std::vector<int>& device_of, int64_t incarnation) {
  if (!graph.validated()) return FailedPrecondition("partitioning needs a validated graph");
  const int n = graph.num_nodes();
  if (static_cast<int>(device_of.size()) != n) {
    return InvalidArgument("placement covers {} nodes, the graph has {}", device_of.size(), n);
  }
  std::map<int, std::vector<NodeDef>> defs;  // device -> node defs
  for (int v = 0; v < n; ++v) {
    if (device_of[v] < 0 || device_of[v] >= devices.size()) {
      return InvalidArgument("node '{}' is placed on device {}, outside the set of {}",
                             graph.node(v).name(), device_of[v], devices.size());
    }
  }
  // (producer, output or -1 for control, destination device) -> the Recv's name there.
  std::map<std::tuple<int, int, int>, std::string> recvs;
  PartitionedGraph out;
  auto recv_for = [&](int u, int output, int dst) -> std::string {
    auto key = std::make_tuple(u, output, dst);
    auto it = recvs.find(key);
    if (it != recvs.end()) return it->second;
    const Node& src = graph.node(u);
    int sd = device_of[u];
    std::string src_dev = devices.device(sd).canonical(), dst_dev = devices.device(dst).canonical();
    std::string tag = output >= 0 ? std::to_string(output) : "ctl";
    std::string to = Compact(devices.DisplayName(dst));
    std::string tensor_name = output >= 0 ? fmt::format("{}:{}", src.name(), output)
                                          : fmt::format("{}:control", src.name());
    DType dtype = output >= 0 ? src.output_dtype(output) : DType::kBool;
    Shape shape = output >= 0 ? src.output_shape(output) : Shape{0};
    AttrMap key_attrs = {{"T", dtype},
                         {"tensor_name", tensor_name},
                         {"send_device", src_dev},
                         {"send_device_incarnation", incarnation},
                         {"recv_device", dst_dev}};
    NodeDef send;
    send.name = fmt::format("{}/_send_{}_to_{}", src.name(), tag, to);
    send.op = "_Send";
    send.attrs = key_attrs;
    send.device = src_dev;
    if (output >= 0) {
      send.inputs = {InputRef{src.name(), output}};
    } else {
      // An empty tensor, made once the source node ran, carries the control edge.
      NodeDef empty;
      empty.name = fmt::format("{}/_ctl_{}", src.name(), to);
      empty.op = "Const";
      empty.attrs = {{"value", Tensor(DType::kBool, Shape{0})}, {"dtype", DType::kBool}};
      empty.control_inputs = {src.name()};
      empty.device = src_dev;
      send.inputs = {InputRef{empty.name, 0}};
      defs[sd].push_back(std::move(empty));
    }
    defs[sd].push_back(std::move(send));
    NodeDef recv;
    recv.name = fmt::format("{}/_recv_{}_on_{}", src.name(), tag, to);
    recv.op = "_Recv";
    recv.attrs = key_attrs;
    recv.attrs["shape"] = shape;
    recv.device = dst_dev;
    defs[dst].push_back(recv);
    out.send_recv_pairs++;
    return recvs[key] = recv.name;
  };
  for (int v = 0; v < n; ++v) {
    const Node& node = graph.node(v);
    int d = device_of[v];
    NodeDef def = node.def();
    def.device = devices.device(d).canonical();
    def.colocation_group.clear();  // placement has been decided
    for (size_t i = 0; i < node.inputs().size(); ++i) {
      const Endpoint& e = node.inputs()[i];
      if (device_of[e.node] != d) def.inputs[i] = InputRef{recv_for(e.node, e.index, d), 0};
    }
    def.control_inputs.clear();
    for (int c : node.control_inputs()) {
      def.control_inputs.push_back(device_of[c] == d ? graph.node(c).name() : recv_for(c, -1, d));
    }
    defs[d].push_back(std::move(def));
  }
  for (auto& [d, nodes] : defs) {
    GraphPartition part{d, Graph(&graph.registry())};
    for (auto& def : nodes) RETURN_IF_ERROR(part.graph.AddNode(std::move(def)).status());
    RETURN_IF_ERROR(part.graph.Validate().WithPrefix(
        fmt::format("partition for {}: ", devices.DisplayName(d))));
    out.partitions.push_back(std::move(part));
  }
  return out;
}

}  // namespace dflow
