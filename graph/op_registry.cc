#include "graph/op_registry.h"

#include <algorithm>

namespace dflow {

const AttrDef* OpDef::FindAttr(std::string_view attr) const {
  for (const auto& a : attrs) {
    if (a.name == attr) return &a;
  }
  return nullptr;
}

OpCost ElementwiseCost(const CostContext& ctx, double flops_per_element) {
  OpCost c;
  for (size_t i = 0; i < ctx.input_shapes.size(); ++i) {
    c.bytes_read +=
        std::max<int64_t>(ctx.input_shapes[i].num_elements(), 0) * DTypeSize(ctx.input_dtypes[i]);
  }
  for (size_t i = 0; i < ctx.output_shapes.size(); ++i) {
    double n = std::max<int64_t>(ctx.output_shapes[i].num_elements(), 0);
    c.bytes_written += n * DTypeSize(ctx.output_dtypes[i]);
    c.flops += n * flops_per_element;
  }
  return c;
}

OpRegistry& OpRegistry::Global() {
  static auto* registry = new OpRegistry;
  return *registry;
}

Status OpRegistry::Register(OpDef def) {
  if (def.name.empty()) return InvalidArgument("op definition without a name");
  if (!def.shape_fn) return InvalidArgument("op '{}' has no shape function", def.name);
  for (size_t i = 0; i < def.inputs.size(); ++i) {
    if (def.inputs[i].variadic && i + 1 != def.inputs.size()) {
      return InvalidArgument("op '{}': only the last input may be variadic", def.name);
    }
  }
  for (size_t i = 0; i < def.outputs.size(); ++i) {
    const std::string& count = def.outputs[i].number_attr;
    if (count.empty()) continue;
    const AttrDef* attr = def.FindAttr(count);
    if (i + 1 != def.outputs.size() || attr == nullptr || attr->type != AttrType::kInt) {
      return InvalidArgument(
          "op '{}': a repeated output must be the last one and be counted by an int attribute",
          def.name);
    }
  }
  if (!def.cost_fn) def.cost_fn = [](const CostContext& c) { return ElementwiseCost(c, 0); };
  std::unique_lock lock(mu_);
  if (ops_.count(def.name)) return InvalidArgument("op '{}' is already registered", def.name);
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
  return Status::OK();
}

const OpDef* OpRegistry::Find(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = ops_.find(std::string(name));
  return it == ops_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, def] : ops_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace dflow
