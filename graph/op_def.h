// OpDef: what an op is, independent of any device: its inputs and outputs with their dtype
// constraints, its attributes with defaults, whether it is stateful, and the functions that
// give its output shapes, its cost and (from the autodiff issue on) its gradient.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/attr_value.h"
#include "graph/status.h"

namespace dflow {

class Graph;
class Node;

// One input or output. Its dtype is either fixed, or given by a type attribute shared with
// other arguments (all arguments naming "T" have the same dtype), optionally restricted.
struct ArgDef {
  std::string name;
  DType fixed = DType::kInvalid;
  std::string type_attr;
  std::vector<DType> allowed;         // empty: any dtype
  bool variadic = false;              // only the last input; takes one or more tensors
  bool may_be_uninitialized = false;  // Assign's ref input: an uninitialised variable is fine
  // Outputs only, the last one: repeated as many times as this int attribute says (>= 1).
  std::string number_attr;
};

struct AttrDef {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // none: the attribute is required
};

// What shape functions see: the node, its input dtypes and shapes and its attributes; they
// fill output_shapes.
class InferenceContext {
 public:
  InferenceContext(const Graph& graph, const Node& node, std::span<const DType> input_dtypes,
                   std::span<const Shape> input_shapes, std::span<const DType> output_dtypes);

  const Node& node() const { return node_; }
  // The node producing input i.
  const Node& input_node(int i) const;
  int num_inputs() const { return static_cast<int>(input_shapes_.size()); }
  const Shape& input_shape(int i) const { return input_shapes_[i]; }
  DType input_dtype(int i) const { return input_dtypes_[i]; }
  DType output_dtype(int i) const { return output_dtypes_[i]; }
  void set_output(int i, Shape shape) { output_shapes[i] = shape; }
  // The node's attribute; InvalidArgument naming the node when missing or of another type.
  template <typename T>
  Result<T> GetAttr(std::string_view name) const;
  // InvalidArgument whose message starts with "node 'NAME' (OP): ".
  template <typename... Args>
  Status Error(fmt::format_string<Args...> format, Args&&... args) const {
    return InvalidArgument("{}{}", Prefix(), fmt::format(format, std::forward<Args>(args)...));
  }
  std::string Prefix() const;

  std::vector<Shape> output_shapes;

 private:
  const Graph& graph_;
  const Node& node_;
  std::span<const DType> input_dtypes_;
  std::span<const Shape> input_shapes_;
  std::span<const DType> output_dtypes_;
};

// Work an op does for given shapes: the cost model's input.
struct OpCost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
};

struct CostContext {
  const Node& node;
  std::span<const DType> input_dtypes;
  std::span<const Shape> input_shapes;
  std::span<const DType> output_dtypes;
  std::span<const Shape> output_shapes;
};

class GradContext;  // defined by the autodiff issue

using ShapeFn = std::function<Status(InferenceContext&)>;
using CostFn = std::function<OpCost(const CostContext&)>;
using GradFn = std::function<Status(GradContext&)>;

// The part a node plays for the stages that treat it specially; most ops compute.
enum class OpRole : uint8_t {
  kCompute,
  kPlaceholder,  // takes a value fed at run time
  kVariable,     // holds a value across runs: the variable's
  kAssign,       // writes input 1 into the variable of input 0
  kSend,         // hands a tensor to a Recv on another device (the partitioner's)
  kRecv,
  kNoOp,  // runs for its control edges only
};

// An op as an epilogue the fusion rewrite folds into the op producing its input
// (rewrite/fusion.h), or as the way such a producer's bias comes.
enum class Epilogue : uint8_t {
  kNone,
  kBiasAdd,     // BiasAdd(x, bias): one value per last-dimension channel
  kChannelAdd,  // Add(x, bias) where bias holds one value per dimension-1 channel ([C,1,1])
  kRelu,        // an activation, named by the fused op's "activation" attribute
  kReluGrad,    // ReluGrad(g, x): the activation's gradient, folded into a max pool's
};

// What the fusion rewrite (rewrite/fusion.h) may make of an op's nodes.
struct OpFusion {
  enum class Kind : uint8_t {
    kNone,
    kEpilogue,        // its output takes a bias (by `bias`) and a kRelu: becomes `fused_op`
    kArgmax,          // with its gradient (the op whose gradient_of names it) becomes
                      // `fused_op` and `fused_partner`, which keep where each maximum came from
    kAbsorbGradient,  // takes the producer of input `gradient_input` (an `absorbable` op)
                      // into itself: becomes `fused_op`
    kAccumulate,      // a sum that takes an `absorbable` producer of either input into itself,
                      // adding its product to the other input: becomes `fused_op`
  };
  Kind kind = Kind::kNone;
  std::string fused_op;
  std::string fused_partner;
  Epilogue bias = Epilogue::kNone;
  int gradient_input = -1;
  // A producer an update may absorb (kAbsorbGradient).
  bool absorbable = false;
};

struct OpDef {
  std::string name;
  std::vector<ArgDef> inputs;
  std::vector<ArgDef> outputs;
  std::vector<AttrDef> attrs;
  // Holds state across runs (Variable) or has effects (Assign): never pruned as a duplicate,
  // never moved away from its colocation group.
  bool stateful = false;
  // Does constant work whatever the shapes (Identity, Reshape, NoOp): always run inline.
  bool constant_cost = false;

  // Properties the stages ask instead of keeping lists of op names.
  OpRole role = OpRole::kCompute;
  // Each output element is computed from the input elements at the same index (inputs
  // broadcast NumPy's way): a kernel may run it in place, a partition may split it anywhere.
  bool elementwise = false;
  // Inputs 0 and 1 may trade places without changing the output.
  bool commutative = false;
  // Updates the variable of input 0 row by row, each row from the same rows of its other
  // inputs (or from scalars): a variable split into row shards updates shard by shard
  // (rewrite/split_variables.h).
  bool row_wise_update = false;
  // This op as an epilogue (kNone: it is none).
  Epilogue epilogue = Epilogue::kNone;
  OpFusion fusion;
  // The op whose gradient this op computes, where a rewrite must pair them ("MaxPool").
  std::string gradient_of;
  ShapeFn shape_fn;  // required
  CostFn cost_fn;    // default: no FLOPs, every input and output byte moved once
  GradFn grad_fn;    // empty: not differentiable

  const AttrDef* FindAttr(std::string_view attr) const;
};

// The default cost: bytes of inputs read and outputs written, `flops_per_element` per output
// element.
OpCost ElementwiseCost(const CostContext& ctx, double flops_per_element = 1);

}  // namespace dflow
