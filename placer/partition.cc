#include "placer/partition.h"

#include <algorithm>
#include <unordered_map>

namespace dflow {
namespace {

std::string Compact(std::string s) {  // "cpu:1" -> "cpu1" for node names
  s.erase(std::remove(s.begin(), s.end(), ':'), s.end());
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

}  // namespace

Result<PartitionedGraph> PartitionGraph(const Graph& graph, const DeviceSet& devices,
                                        const std::vector<int>& device_of) {
  if (!graph.validated()) return FailedPrecondition("partitioning needs a validated graph");
  const int n = graph.num_nodes();
  if (static_cast<int>(device_of.size()) != n) {
    return InvalidArgument("placement covers {} nodes, the graph has {}", device_of.size(), n);
  }
  for (int v = 0; v < n; ++v) {
    if (device_of[v] < 0 || device_of[v] >= devices.size()) {
      return InvalidArgument("node '{}' is placed on device {}, outside the set of {}",
                             graph.node(v).name(), device_of[v], devices.size());
    }
  }
  // Per device: its canonical name and its compact short name for node names.
  std::vector<std::string> canonical, compact;
  for (int d = 0; d < devices.size(); ++d) {
    canonical.push_back(devices.device(d).canonical());
    compact.push_back(Compact(devices.DisplayName(d)));
  }
  // Nodes go straight into each device's graph (inputs may name nodes added later).
  std::vector<Graph> parts;
  std::vector<int> sizes(devices.size(), 0);
  for (int v = 0; v < n; ++v) sizes[device_of[v]]++;
  for (int d = 0; d < devices.size(); ++d) {
    parts.emplace_back(&graph.registry());
    parts.back().Reserve(sizes[d] + sizes[d] / 2);
  }
  Status added;
  auto add = [&](int d, NodeDef def) {
    if (auto id = parts[d].AddNode(std::move(def)); !id.ok() && added.ok()) added = id.status();
  };
  // (producer, output or -1 for control, destination device) -> the Recv's name there.
  // Unique while (outputs + 1) * devices < 2^32: outputs are at most 65,536 per node.
  auto key_of = [&](int u, int output, int dst) {
    return static_cast<uint64_t>(u) << 32 |
           (static_cast<uint64_t>(output + 1) * static_cast<uint64_t>(devices.size()) +
            static_cast<uint64_t>(dst));
  };
  std::unordered_map<uint64_t, std::string> recvs;
  PartitionedGraph out;
  auto recv_for = [&](int u, int output, int dst) -> const std::string& {
    auto [it, fresh] = recvs.try_emplace(key_of(u, output, dst));
    if (!fresh) return it->second;
    const Node& src = graph.node(u);
    int sd = device_of[u];
    std::string tag = output >= 0 ? std::to_string(output) : "ctl";
    std::string tensor_name = output >= 0 ? fmt::format("{}:{}", src.name(), output)
                                          : fmt::format("{}:control", src.name());
    DType dtype = output >= 0 ? src.output_dtype(output) : DType::kBool;
    Shape shape = output >= 0 ? src.output_shape(output) : Shape{0};
    AttrMap key_attrs = {
        {"T", dtype},
        {"tensor_name", std::move(tensor_name)},
        {"send_device", canonical[sd]},
        {"send_device_incarnation", static_cast<int64_t>(devices.device(sd).incarnation)},
        {"recv_device", canonical[dst]}};
    NodeDef send;
    send.name = fmt::format("{}/_send_{}_to_{}", src.name(), tag, compact[dst]);
    send.op = "_Send";
    send.attrs = key_attrs;
    send.device = canonical[sd];
    if (output >= 0) {
      send.inputs = {InputRef{src.name(), output}};
    } else {
      // An empty tensor, made once the source node ran, carries the control edge.
      NodeDef empty;
      empty.name = fmt::format("{}/_ctl_{}", src.name(), compact[dst]);
      empty.op = "Const";
      empty.attrs = {{"value", Tensor(DType::kBool, Shape{0})}, {"dtype", DType::kBool}};
      empty.control_inputs = {src.name()};
      empty.device = canonical[sd];
      send.inputs = {InputRef{empty.name, 0}};
      add(sd, std::move(empty));
    }
    add(sd, std::move(send));
    NodeDef recv;
    recv.name = fmt::format("{}/_recv_{}_on_{}", src.name(), tag, compact[dst]);
    recv.op = "_Recv";
    recv.attrs = std::move(key_attrs);
    recv.attrs.emplace("shape", shape);
    recv.device = canonical[dst];
    it->second = recv.name;
    add(dst, std::move(recv));
    out.send_recv_pairs++;
    return it->second;
  };
  for (int v = 0; v < n; ++v) {
    const Node& node = graph.node(v);
    int d = device_of[v];
    NodeDef def = node.def();
    def.device = canonical[d];
    def.colocation_group.clear();  // placement has been decided
    for (size_t i = 0; i < node.inputs().size(); ++i) {
      const Endpoint& e = node.inputs()[i];
      if (device_of[e.node] != d) def.inputs[i] = InputRef{recv_for(e.node, e.index, d), 0};
    }
    def.control_inputs.clear();
    for (int c : node.control_inputs()) {
      def.control_inputs.push_back(device_of[c] == d ? graph.node(c).name() : recv_for(c, -1, d));
    }
    add(d, std::move(def));
  }
  RETURN_IF_ERROR(added);
  for (int d = 0; d < devices.size(); ++d) {
    if (parts[d].num_nodes() == 0) continue;
    RETURN_IF_ERROR(
        parts[d].Validate().WithPrefix(fmt::format("partition for {}: ", devices.DisplayName(d))));
    out.partitions.push_back({d, std::move(parts[d])});
  }
  return out;
}

}  // namespace dflow
