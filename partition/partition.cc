#include "partition/partition.h"

#include <algorithm>
#include <unordered_map>

namespace dflow {
namespace {

std::string Compact(std::string s) {  // "cpu:1" -> "cpu1" for node names
  s.erase(std::remove(s.begin(), s.end(), ':'), s.end());
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

// (producer, output or -1 for control, destination device) as one key. Unique while
// (outputs + 1) * devices < 2^32: outputs are at most 65,536 per node.
uint64_t TransferKey(int producer, int output, int dst, int num_devices) {
  return static_cast<uint64_t>(producer) << 32 |
         (static_cast<uint64_t>(output + 1) * static_cast<uint64_t>(num_devices) +
          static_cast<uint64_t>(dst));
}

}  // namespace

Result<PartitionedGraph> PartitionGraph(const Graph& graph, const DeviceSet& devices,
                                        const std::vector<int>& device_of,
                                        const std::vector<bool>* include) {
  if (!graph.validated()) return FailedPrecondition("partitioning needs a validated graph");
  const int n = graph.num_nodes();
  if (static_cast<int>(device_of.size()) != n) {
    return InvalidArgument("placement covers {} nodes, the graph has {}", device_of.size(), n);
  }
  if (include != nullptr && static_cast<int>(include->size()) != n) {
    return InvalidArgument("the node mask covers {} nodes, the graph has {}", include->size(), n);
  }
  auto included = [&](int v) { return include == nullptr || (*include)[v]; };
  for (int v = 0; v < n; ++v) {
    if (included(v) && (device_of[v] < 0 || device_of[v] >= devices.size())) {
      return InvalidArgument("node '{}' is placed on device {}, outside the set of {}",
                             graph.node(v).name(), device_of[v], devices.size());
    }
  }
  PartitionedGraph out;
  out.device_of = device_of;
  std::vector<int> slot(devices.size(), -1);  // device -> index in out.partitions
  std::vector<int> sizes(devices.size(), 0);
  for (int v = 0; v < n; ++v) {
    if (included(v)) sizes[device_of[v]]++;
  }
  for (int d = 0; d < devices.size(); ++d) {
    if (sizes[d] == 0) continue;
    slot[d] = static_cast<int>(out.partitions.size());
    out.partitions.push_back({d, {}});
    out.partitions.back().nodes.reserve(sizes[d]);
  }
  std::unordered_map<uint64_t, int> seen;
  auto cross = [&](int v, int u, int output, int d) {
    if (!included(u)) {
      return InvalidArgument("node '{}' reads node '{}', which the node mask leaves out",
                             graph.node(v).name(), graph.node(u).name());
    }
    if (device_of[u] == d) return Status::OK();
    auto [it, fresh] = seen.try_emplace(TransferKey(u, output, d, devices.size()),
                                        static_cast<int>(out.transfers.size()));
    if (fresh) out.transfers.push_back({u, output, device_of[u], d});
    return Status::OK();
  };
  for (int v = 0; v < n; ++v) {
    if (!included(v)) continue;
    const Node& node = graph.node(v);
    const int d = device_of[v];
    out.partitions[slot[d]].nodes.push_back(v);
    for (const Endpoint& e : node.inputs()) RETURN_IF_ERROR(cross(v, e.node, e.index, d));
    for (int c : node.control_inputs()) RETURN_IF_ERROR(cross(v, c, -1, d));
  }
  out.send_recv_pairs = static_cast<int>(out.transfers.size());
  return out;
}

Result<Graph> BuildPartitionGraph(const Graph& graph, const DeviceSet& devices,
                                  const PartitionedGraph& parts, int index) {
  if (index < 0 || index >= static_cast<int>(parts.partitions.size())) {
    return InvalidArgument("partition {} of {}", index, parts.partitions.size());
  }
  const GraphPartition& part = parts.partitions[index];
  const int d = part.device;
  const std::string canonical = devices.device(d).canonical();
  const int num_devices = devices.size();
  auto compact = [&](int device) { return Compact(devices.DisplayName(device)); };

  // This partition's transfers, in and out.
  int ins = 0, outs = 0;
  for (const Transfer& t : parts.transfers) {
    ins += t.dst_device == d;
    outs += t.src_device == d;
  }
  Graph g(&graph.registry());
  g.Reserve(static_cast<int>(part.nodes.size()) + ins + 2 * outs);
  std::unordered_map<uint64_t, std::string> recv_name;  // transfer key -> _Recv's name
  recv_name.reserve(ins);
  for (const Transfer& t : parts.transfers) {
    const bool in = t.dst_device == d, out = t.src_device == d;
    if (!in && !out) continue;
    const Node& src = graph.node(t.producer);
    std::string tag = t.output >= 0 ? std::to_string(t.output) : "ctl";
    std::string tensor_name = t.output >= 0 ? fmt::format("{}:{}", src.name(), t.output)
                                            : fmt::format("{}:control", src.name());
    DType dtype = t.output >= 0 ? src.output_dtype(t.output) : DType::kBool;
    AttrMap key = {
        {"T", dtype},
        {"tensor_name", std::move(tensor_name)},
        {"send_device", devices.device(t.src_device).canonical()},
        {"send_device_incarnation", static_cast<int64_t>(devices.device(t.src_device).incarnation)},
        {"recv_device", devices.device(t.dst_device).canonical()}};
    if (out) {
      NodeDef send;
      send.name = fmt::format("{}/_send_{}_to_{}", src.name(), tag, compact(t.dst_device));
      send.op = "_Send";
      send.attrs = std::move(key);
      send.device = canonical;
      if (t.output >= 0) {
        send.inputs = {InputRef{src.name(), t.output}};
      } else {
        // An empty tensor, made once the source node ran, carries the control edge.
        NodeDef empty;
        empty.name = fmt::format("{}/_ctl_{}", src.name(), compact(t.dst_device));
        empty.op = "Const";
        empty.attrs = {{"value", Tensor(DType::kBool, Shape{0})}, {"dtype", DType::kBool}};
        empty.control_inputs = {src.name()};
        empty.device = canonical;
        send.inputs = {InputRef{empty.name, 0}};
        RETURN_IF_ERROR(g.AddNode(std::move(empty)).status());
      }
      RETURN_IF_ERROR(g.AddNode(std::move(send)).status());
    } else {
      NodeDef recv;
      recv.name = fmt::format("{}/_recv_{}_on_{}", src.name(), tag, compact(d));
      recv.op = "_Recv";
      recv.attrs = std::move(key);
      recv.attrs.emplace("shape", t.output >= 0 ? src.output_shape(t.output) : Shape{0});
      recv.device = canonical;
      recv_name.emplace(TransferKey(t.producer, t.output, d, num_devices), recv.name);
      RETURN_IF_ERROR(g.AddNode(std::move(recv)).status());
    }
  }
  const std::vector<int>& device_of = parts.device_of;
  for (int v : part.nodes) {
    const Node& node = graph.node(v);
    NodeDef def = node.def();
    def.device = canonical;
    def.colocation_group.clear();  // placement has been decided
    for (size_t i = 0; i < node.inputs().size(); ++i) {
      const Endpoint& e = node.inputs()[i];
      if (device_of[e.node] != d) {
        def.inputs[i] = InputRef{recv_name.at(TransferKey(e.node, e.index, d, num_devices)), 0};
      }
    }
    def.control_inputs.clear();
    for (int c : node.control_inputs()) {
      def.control_inputs.push_back(device_of[c] == d
                                       ? graph.node(c).name()
                                       : recv_name.at(TransferKey(c, -1, d, num_devices)));
    }
    RETURN_IF_ERROR(g.AddValidatedCopy(node, std::move(def)).status());
  }
  RETURN_IF_ERROR(
      g.Validate().WithPrefix(fmt::format("partition for {}: ", devices.DisplayName(d))));
  return g;
}

}  // namespace dflow
