// What an op's converter sees of the ONNX node it turns into dflow ops (onnx_ops.cc): its inputs
// as dflow outputs or, when known at import, as constant tensors; its attributes; and where its
// outputs go. Internal to the importer.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/scope.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "onnx/onnx_headers.h"

namespace dflow::onnx {

// The values of an import so far: ONNX value names to dflow outputs, and the values known at
// import time (initializers, Constant nodes, shapes), which become Const nodes when an op needs
// them as a tensor.
class Values {
 public:
  explicit Values(Scope root) : root_(std::move(root)) {}
  const Scope& root() const { return root_; }
  bool Has(const std::string& name) const { return outputs_.count(name) || constants_.count(name); }
  void SetOutput(const std::string& name, dflow::Output o) { outputs_[name] = o; }
  void SetConstant(const std::string& name, Tensor t) { constants_[name] = std::move(t); }
  // The value as a graph output; a constant gets its Const node on first use, a trainable one
  // its Variable (named `node_name`, or that with "_var" while taken) and the Assign of its
  // initial value.
  Result<dflow::Output> Get(const std::string& name);
  // The value when it is known at import; nullptr otherwise. A trainable value is known too (an
  // op that needs it at import, a Clip bound, keeps its initial value) but is never folded.
  const Tensor* Constant(const std::string& name) const;
  // Marks the constant `name` (an initializer) as a parameter to train.
  void SetTrainable(const std::string& name, std::string node_name) {
    trainable_[name] = std::move(node_name);
  }
  bool IsTrainable(const std::string& name) const { return trainable_.count(name) > 0; }
  // The Variables made of trainable values so far, and their initializing Assigns.
  const std::vector<dflow::Output>& variables() const { return variables_; }
  const std::vector<dflow::Output>& assigns() const { return assigns_; }
  // The dimensions ONNX's shape inference gave a value (-1 where unknown or symbolic); nullptr
  // when it gave none.
  void SetInferred(const std::string& name, std::vector<int64_t> dims) {
    inferred_[name] = std::move(dims);
  }
  const std::vector<int64_t>* Inferred(const std::string& name) const {
    auto it = inferred_.find(name);
    return it == inferred_.end() ? nullptr : &it->second;
  }

 private:
  Scope root_;
  std::map<std::string, dflow::Output> outputs_;
  std::map<std::string, Tensor> constants_;
  std::map<std::string, std::vector<int64_t>> inferred_;
  std::map<std::string, std::string> trainable_;  // value name to its Variable's node name
  std::vector<dflow::Output> variables_, assigns_;
};

class NodeContext {
 public:
  NodeContext(Values& values, const ::onnx::NodeProto& node, Scope scope, int64_t opset)
      : values_(values), node_(node), scope_(std::move(scope)), opset_(opset) {}

  const ::onnx::NodeProto& node() const { return node_; }
  const Scope& scope() const { return scope_; }
  int64_t opset() const { return opset_; }

  int num_inputs() const { return node_.input_size(); }
  // Input i is given (optional inputs may be absent or "").
  bool has_input(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  Result<Output> input(int i);
  // Input i is given and its value known at import.
  bool known_input(int i) const {
    return has_input(i) && values_.Constant(node_.input(i)) != nullptr;
  }
  // Input i's value when known at import: InvalidArgument saying it must be a constant.
  Result<Tensor> constant_input(int i) const;
  // An integer constant input (int64 or int32) as numbers.
  Result<std::vector<int64_t>> ints_input(int i) const;

  const ::onnx::AttributeProto* attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> attr_ints(const std::string& name) const;

  // The dimensions ONNX's shape inference gave output i (-1 where unknown); empty when none.
  std::vector<int64_t> inferred_output_dims(int i) const {
    const auto* d = i < node_.output_size() ? values_.Inferred(node_.output(i)) : nullptr;
    return d ? *d : std::vector<int64_t>{};
  }

  int num_outputs() const { return node_.output_size(); }
  bool wants_output(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }
  // Records output i (nothing when the model does not use it).
  void set_output(int i, Output o);
  void set_constant_output(int i, Tensor t);

 private:
  Values& values_;
  const ::onnx::NodeProto& node_;
  Scope scope_;
  int64_t opset_;
};

// Turns one ONNX node into dflow ops (errors without the node's name: the importer adds it).
using Converter = Status (*)(NodeContext& ctx);
// Op type to converter, for the default domain.
const std::map<std::string, Converter>& Converters();

}  // namespace dflow::onnx
