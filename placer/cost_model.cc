#include "placer/cost_model.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace dflow {
namespace {

Shape Concrete(const Shape& s, int64_t unknown_dim) {
  if (s.unknown_rank()) return Shape{unknown_dim};
  std::vector<int64_t> dims = s.dim_vector();
  for (auto& d : dims) d = d < 0 ? unknown_dim : d;
  return Shape(dims);
}

double Bytes(const Shape& s, DType t) {
  return static_cast<double>(s.num_elements()) * static_cast<double>(DTypeSize(t));
}

}  // namespace

Result<MeasuredCosts> MeasuredCosts::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cost file '{}' cannot be opened", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("cost file '{}' is not valid JSON", path);
  if (!j.is_object() || j.value("version", 0) != 1 || !j.contains("devices") ||
      !j["devices"].is_object()) {
    return InvalidArgument("cost file '{}': expected {{\"version\": 1, \"devices\": {{...}}}}",
                           path);
  }
  MeasuredCosts costs;
  for (const auto& [device, nodes] : j["devices"].items()) {
    if (!nodes.is_object()) {
      return InvalidArgument("cost file '{}': device '{}' must map node names to seconds", path,
                             device);
    }
    for (const auto& [node, secs] : nodes.items()) {
      if (!secs.is_number() || secs.get<double>() < 0) {
        return InvalidArgument("cost file '{}': node '{}' on '{}' needs seconds >= 0", path, node,
                               device);
      }
      costs.seconds[device][node] = secs.get<double>();
    }
  }
  return costs;
}

void CostProfile::Add(const std::string& device, const std::string& node, const std::string& op,
                      double seconds) {
  // Transfers are the links' to price, not the devices'.
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def != nullptr && (def->role == OpRole::kSend || def->role == OpRole::kRecv)) return;
  auto& [total, runs] = totals_[device][node];
  total += seconds;
  ++runs;
}

MeasuredCosts CostProfile::Means() const {
  MeasuredCosts out;
  for (const auto& [device, nodes] : totals_) {
    for (const auto& [node, entry] : nodes) out.seconds[device][node] = entry.first / entry.second;
  }
  return out;
}

Status MeasuredCosts::Save(const std::string& path) const {
  nlohmann::json j = {{"version", 1}, {"devices", nlohmann::json::object()}};
  for (const auto& [device, nodes] : seconds) {
    for (const auto& [node, secs] : nodes) j["devices"][device][node] = secs;
  }
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) return Internal("cost file '{}' could not be written", path);
  return Status::OK();
}

Result<CostModel> CostModel::Build(const Graph& graph, const DeviceSet& devices,
                                   const CostOptions& options) {
  if (!graph.validated()) return FailedPrecondition("the cost model needs a validated graph");
  CostModel m;
  m.devices_ = &devices;
  m.num_devices_ = devices.size();
  const int n = graph.num_nodes();
  m.compute_.assign(static_cast<size_t>(n) * m.num_devices_, 0);
  m.first_output_.assign(n + 1, 0);
  m.output_bytes_.reserve(n);
  m.persistent_.assign(n, 0);
  for (const DeviceSpec& spec : devices.devices()) m.overhead_.push_back(spec.launch_overhead_s);
  std::vector<DType> in_dtypes;  // reused, node after node
  std::vector<Shape> in_shapes, out_shapes;
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    in_dtypes.clear();
    in_shapes.clear();
    out_shapes.clear();
    for (const auto& e : node.inputs()) {
      const Node& src = graph.node(e.node);
      in_dtypes.push_back(src.output_dtype(e.index));
      in_shapes.push_back(Concrete(src.output_shape(e.index), options.unknown_dim));
    }
    for (int o = 0; o < node.num_outputs(); ++o) {
      out_shapes.push_back(Concrete(node.output_shape(o), options.unknown_dim));
      m.output_bytes_.push_back(Bytes(out_shapes.back(), node.output_dtype(o)));
    }
    m.first_output_[id + 1] = static_cast<int64_t>(m.output_bytes_.size());
    // A variable's value and a constant's stay on the device for the session's life.
    if (node.role() == OpRole::kVariable || node.op() == "Const") {
      m.persistent_[id] = m.OutputBytes(id, 0);
    }
    OpCost cost = node.op_def()->cost_fn(
        CostContext{node, in_dtypes, in_shapes, node.output_dtypes(), out_shapes});
    for (int d = 0; d < m.num_devices_; ++d) {
      const DeviceSpec& spec = devices.device(d);
      double secs = spec.launch_overhead_s +
                    std::max(cost.flops / spec.peak_flops,
                             (cost.bytes_read + cost.bytes_written) / spec.memory_bandwidth);
      if (options.measured != nullptr) {
        for (const std::string& key : {spec.canonical(), spec.type()}) {
          auto dev = options.measured->seconds.find(key);
          if (dev == options.measured->seconds.end()) continue;
          auto it = dev->second.find(node.name());
          if (it != dev->second.end()) {
            secs = it->second;
            break;
          }
        }
      }
      m.compute_[static_cast<size_t>(id) * m.num_devices_ + d] = secs;
    }
  }
  // Activations. A node is init-only when it has consumers and every one is an Assign taking
  // it as the value, or init-only itself (consumers come later in topological order).
  std::vector<bool> writes_variable(n, false), init_only(n, false);
  auto consumers = graph.Consumers();
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (node.op_def() == nullptr || !node.op_def()->stateful) continue;
    for (const auto& e : node.inputs()) {
      if (graph.node(e.node).role() == OpRole::kVariable) writes_variable[id] = true;
    }
  }
  const auto& topo = graph.topological_order();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    int id = *it;
    if (consumers[id].empty()) continue;
    bool only = true;
    for (const auto& [to, slot] : consumers[id]) {
      const Node& c = graph.node(to);
      bool assigned = c.role() == OpRole::kAssign && slot == 1;
      if (!(assigned || init_only[to])) {
        only = false;
        break;
      }
    }
    init_only[id] = only;
  }
  m.activation_.assign(n, 0);
  for (int id = 0; id < n; ++id) {
    if (m.persistent_[id] > 0 || writes_variable[id] || init_only[id]) continue;
    m.activation_[id] = m.TotalOutputBytes(id);
  }
  return m;
}

double CostModel::TotalOutputBytes(int node) const {
  double total = 0;
  for (int64_t i = first_output_[node]; i < first_output_[node + 1]; ++i) total += output_bytes_[i];
  return total;
}

}  // namespace dflow
