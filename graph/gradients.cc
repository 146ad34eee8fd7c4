#include "graph/gradients.h"

#include <algorithm>
#include <map>

namespace dflow {

GradContext::GradContext(const Scope& scope, const Node& node, std::vector<Output> grads,
                         std::vector<bool> wanted)
    : scope_(scope),
      node_id_(node.id()),
      grads_(std::move(grads)),
      wanted_(std::move(wanted)),
      input_grads_(node.num_inputs()) {}

Output GradContext::input(int i) const {
  const Endpoint& e = node().inputs()[i];
  return scope_.OutputOf(e.node, e.index);
}

Output GradContext::output(int i) const { return scope_.OutputOf(node_id_, i); }

namespace {

Status Fail(const Scope& scope, Status s) {
  scope.UpdateStatus(s);
  return s;
}

// Sums the contributions to one tensor's gradient.
Output Sum(const Scope& scope, const std::vector<Output>& parts) {
  if (parts.size() == 1) return parts[0];
  return scope.OutputOf(scope.AddNode("AddN", parts, {}));
}

}  // namespace

Result<std::vector<Output>> Gradients(const Scope& scope, Output y, const std::vector<Output>& xs,
                                      Output grad_y) {
  RETURN_IF_ERROR(scope.status());
  if (!y.valid()) return Fail(scope, InvalidArgument("Gradients: y is an invalid Output"));
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid()) return Fail(scope, InvalidArgument("Gradients: x {} is invalid", i));
  }
  const Graph& g = scope.graph();
  const int n = g.num_nodes();

  // Nodes that y depends on, and nodes that depend on some x: the ones between are relevant.
  std::vector<bool> reaches_y(n, false), from_x(n, false);
  std::vector<int> stack = {y.node_id()};
  reaches_y[y.node_id()] = true;
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    for (const auto& e : g.node(id).inputs()) {
      if (!reaches_y[e.node]) {
        reaches_y[e.node] = true;
        stack.push_back(e.node);
      }
    }
  }
  // Nodes are added producers first (builder graphs), so one forward sweep finds descendants.
  for (const auto& x : xs) from_x[x.node_id()] = true;
  for (int id = 0; id < n; ++id) {
    for (const auto& e : g.node(id).inputs()) from_x[id] = from_x[id] || from_x[e.node];
  }

  // Gradient contributions per (node, output).
  std::map<std::pair<int, int>, std::vector<Output>> pending;
  Scope gs = scope.WithNameScope("gradients");
  if (!grad_y.valid()) {
    grad_y = gs.OutputOf(gs.WithOpName(y.node_name() + "_seed").AddNode("OnesLike", {y}, {}));
    RETURN_IF_ERROR(scope.status());
  }
  pending[{y.node_id(), y.index()}].push_back(grad_y);

  std::map<std::pair<int, int>, Output> done;  // summed gradients of the xs
  std::vector<bool> is_x_node(n, false);
  for (const auto& x : xs) is_x_node[x.node_id()] = true;

  for (int id = y.node_id(); id >= 0; --id) {
    if (!reaches_y[id] || !from_x[id]) continue;
    // Gradient functions add nodes, which may move this one: copy what is needed after them.
    const Node& node = g.node(id);
    const std::vector<Endpoint> inputs = node.inputs();
    const std::string name = node.name(), op = node.op(), device = node.requested_device();
    const int num_outputs = node.num_outputs();
    std::vector<Output> grads(num_outputs);
    bool any = false;
    for (int o = 0; o < num_outputs; ++o) {  // `node` may dangle from here on
      auto it = pending.find({id, o});
      if (it == pending.end()) continue;
      grads[o] = Sum(gs, it->second);
      any = true;
      if (is_x_node[id]) done[{id, o}] = grads[o];
    }
    RETURN_IF_ERROR(scope.status());
    if (!any) continue;
    std::vector<bool> wanted(inputs.size());
    bool needs_inputs = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      int src = inputs[i].node;
      wanted[i] = from_x[src] && reaches_y[src];
      needs_inputs = needs_inputs || wanted[i];
    }
    if (!needs_inputs) continue;
    // Summing with AddN above may have moved the node: look it up again.
    const OpDef* def = g.node(id).op_def();
    if (!def->grad_fn) {
      return Fail(scope, InvalidArgument("node '{}': op {} has no gradient, and the gradient of "
                                         "'{}' with respect to the requested inputs flows "
                                         "through it",
                                         name, op, y.name()));
    }
    Scope node_scope = gs.WithNameScope(name + "_grad");
    if (!device.empty()) node_scope = node_scope.WithDevice(device);
    GradContext ctx(node_scope, g.node(id), std::move(grads), wanted);
    Status s = def->grad_fn(ctx);
    if (!s.ok()) return Fail(scope, s);
    RETURN_IF_ERROR(scope.status());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Output gi = ctx.input_grads()[i];
      if (!wanted[i] || !gi.valid()) continue;
      pending[{inputs[i].node, inputs[i].index}].push_back(gi);
    }
  }

  std::vector<Output> out;
  for (const auto& x : xs) {
    auto it = done.find({x.node_id(), x.index()});
    if (it == done.end()) {
      // x may be y itself, or a node visited before its gradient was complete.
      auto p = pending.find({x.node_id(), x.index()});
      if (p != pending.end()) {
        out.push_back(Sum(gs, p->second));
        continue;
      }
      return Fail(scope, InvalidArgument("Gradients: no gradient flows from '{}' to '{}'", y.name(),
                                         x.name()));
    }
    out.push_back(it->second);
  }
  RETURN_IF_ERROR(scope.status());
  return out;
}

}  // namespace dflow
