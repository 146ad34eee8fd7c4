#include "graph/scope.h"

#include "graph/device_name.h"

namespace dflow {

Scope Scope::NewRootScope() {
  auto state = std::make_shared<State>();
  state->graph = std::make_shared<Graph>();
  return Scope(std::move(state));
}

Scope Scope::ExtendGraph(Graph graph) {
  auto state = std::make_shared<State>();
  state->graph = std::make_shared<Graph>(std::move(graph));
  return Scope(std::move(state));
}

Scope Scope::WithDevice(const std::string& device) const {
  Scope s = *this;
  auto parsed = DeviceName::Parse(device);
  if (!parsed.ok()) {
    UpdateStatus(parsed.status());
    return s;
  }
  s.device_ = parsed->ToString();
  return s;
}

Scope Scope::WithNameScope(const std::string& name) const {
  Scope s = *this;
  s.name_prefix_ += name + "/";
  s.op_name_.clear();
  return s;
}

Scope Scope::WithOpName(const std::string& name) const {
  Scope s = *this;
  s.op_name_ = name;
  return s;
}

Scope Scope::WithColocation(const Output& output) const {
  Scope s = *this;
  if (!output.valid()) {
    UpdateStatus(InvalidArgument("WithColocation: the output to colocate with is invalid"));
    return s;
  }
  const Node& n = output.node();
  if (n.colocation_group().empty()) {
    state_->graph->SetColocationGroup(n.id(), n.name());
  }
  s.colocation_ = state_->graph->node(n.id()).colocation_group();
  return s;
}

Scope Scope::WithControlDependencies(const std::vector<Output>& deps) const {
  Scope s = *this;
  for (const auto& d : deps) {
    if (!d.valid()) {
      UpdateStatus(InvalidArgument("WithControlDependencies: an output is invalid"));
      return s;
    }
    s.control_deps_.push_back(d.node_name());
  }
  return s;
}

void Scope::UpdateStatus(const Status& s) const {
  if (state_->status.ok() && !s.ok()) state_->status = s;
}

std::string Scope::UniqueName(const std::string& op) const {
  std::string base = name_prefix_ + (op_name_.empty() ? op : op_name_);
  if (!op_name_.empty()) return base;  // an explicit name is used as given; duplicates error
  const Graph& g = *state_->graph;
  int& count = state_->name_counts[base];
  std::string name = count == 0 ? base : base + "_" + std::to_string(count);
  while (g.FindNode(name)) name = base + "_" + std::to_string(++count);
  ++count;
  return name;
}

bool Scope::CheckInputs(const std::string& op, const std::vector<Output>& inputs) const {
  if (!ok()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) {
      UpdateStatus(InvalidArgument("{}: input {} is an invalid Output", op, i));
      return false;
    }
  }
  return true;
}

int Scope::AddNode(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs) const {
  if (!CheckInputs(op, inputs)) return -1;
  NodeDef def;
  def.name = UniqueName(op);
  def.op = op;
  for (const auto& in : inputs) def.inputs.push_back({in.node_name(), in.index()});
  def.control_inputs = control_deps_;
  def.attrs = std::move(attrs);
  def.device = device_;
  def.colocation_group = colocation_;
  auto id = state_->graph->AddNodeChecked(std::move(def));
  if (!id.ok()) {
    UpdateStatus(id.status());
    return -1;
  }
  return *id;
}

Output Scope::OutputOf(int id, int index) const {
  if (id < 0) return Output();
  return Output(state_->graph.get(), id, index);
}

Result<Output> Scope::FindOutput(std::string_view tensor) const {
  ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(tensor));
  auto id = state_->graph->FindNode(ref.node);
  if (!id) return NotFound("the graph has no node '{}' (for '{}')", ref.node, tensor);
  const Node& node = state_->graph->node(*id);
  if (ref.index >= node.num_outputs()) {
    return NotFound("node '{}' ({}) has {} outputs, so no '{}'", ref.node, node.op(),
                    node.num_outputs(), tensor);
  }
  return Output(state_->graph.get(), *id, ref.index);
}

}  // namespace dflow
