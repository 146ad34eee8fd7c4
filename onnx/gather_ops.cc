// The converters of the ONNX ops that read or write at indexed positions: Gather,
// GatherElements, ScatterElements (and its opset 9 form Scatter), and the two losses that pick
// each sample's log-probability by its class, NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss.
#include <map>
#include <numeric>
#include <string>

#include "onnx/converter_util.h"
#include "onnx/node_context.h"
#include "ops/array_ops.h"
#include "ops/index_ops.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/unary_ops.h"

namespace dflow::onnx {
namespace {

// Gather and GatherElements: the dflow op of the same name along `axis`.
template <Output (*F)(const Scope&, Output, Output, int64_t)>
Status GatherOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output indices, c.input(1));
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", 0), x.shape().rank()));
  c.set_output(0, F(c.scope(), x, indices, axis));
  return Status::OK();
}

Status ScatterElements(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output indices, c.input(1));
  ASSIGN_OR_RETURN(Output updates, c.input(2));
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", 0), x.shape().rank()));
  const std::string reduction = c.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul") {
    return Unimplemented("reduction '{}'", reduction);
  }
  c.set_output(0, ops::ScatterElements(c.scope(), x, indices, updates, axis, reduction));
  return Status::OK();
}

// t with a dimension of 1 inserted at `axis` (t's dimensions known but for at most one).
Result<Output> InsertAxis(const Scope& s, Output t, int64_t axis) {
  if (t.shape().unknown_rank()) return Unimplemented("a target of unknown rank");
  std::vector<int64_t> dims = t.shape().dim_vector();
  dims.insert(dims.begin() + axis, 1);
  ASSIGN_OR_RETURN(std::vector<int64_t> target, ReshapeTarget(dims));
  return ops::Reshape(s, t, target);
}

// The negative log-likelihood of `log_prob` [N, C, d...] at the classes `target` [N, d...]
// (NegativeLogLikelihoodLoss's semantics): -log_prob[n, target[n, d...], d...] weighted by
// weight[target] when given; targets equal to ignore_index count for nothing; reduced by
// `reduction` (none, sum, or mean: the sum over the weights' sum).
Result<Output> NllLoss(NodeContext& c, Output log_prob, Output target, const Output* weight) {
  const Scope& s = c.scope();
  const Shape& ls = log_prob.shape();
  const Shape& ts = target.shape();
  if (ls.unknown_rank() || ls.rank() < 2) {
    return InvalidArgument("input {} must be [N, C] or [N, C, d...]", ls);
  }
  if (!ts.unknown_rank() && ts.rank() != ls.rank() - 1) {
    return InvalidArgument("target {} must have one dimension fewer than the input {}", ts, ls);
  }
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return InvalidArgument("reduction '{}' (none, sum or mean)", reduction);
  }
  // Ignored targets may lie outside [0, C): they pick class 0, whose term is then dropped.
  Output ignored;
  Output safe = target;
  if (const auto* ii = c.attr("ignore_index")) {
    ignored = ops::Equal(s, target, ScalarLike(s, target, static_cast<double>(ii->i())));
    safe = ops::Select(s, ignored, ops::ZerosLike(s, target), target);
  }
  ASSIGN_OR_RETURN(Output picks, InsertAxis(s, safe, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> back, ReshapeTarget(ts.dim_vector()));
  Output picked = ops::Reshape(s, ops::GatherElements(s, log_prob, picks, 1), back);
  Output loss = ops::Neg(s, picked);
  Output w;  // the weight of each term; invalid: 1 each
  if (weight != nullptr) {
    w = ops::Gather(s, *weight, safe, 0);
    loss = ops::Mul(s, loss, w);
  }
  if (ignored.valid()) {
    Output zeros = ops::ZerosLike(s, loss);
    loss = ops::Select(s, ignored, zeros, loss);
    w = ops::Select(s, ignored, zeros, w.valid() ? w : ops::OnesLike(s, loss));
  }
  if (reduction == "none") return loss;
  std::vector<int64_t> all(ts.rank());
  std::iota(all.begin(), all.end(), 0);
  Output sum = ops::ReduceSum(s, loss, all);
  if (reduction == "sum") return sum;
  if (!w.valid()) return ops::ReduceMean(s, loss, all);
  return ops::Div(s, sum, ops::ReduceSum(s, w, all));
}

Status NegativeLogLikelihoodLoss(NodeContext& c) {
  ASSIGN_OR_RETURN(Output input, c.input(0));
  ASSIGN_OR_RETURN(Output target, c.input(1));
  Output weight;
  if (c.has_input(2)) {
    ASSIGN_OR_RETURN(weight, c.input(2));
  }
  ASSIGN_OR_RETURN(Output loss, NllLoss(c, input, target, c.has_input(2) ? &weight : nullptr));
  c.set_output(0, loss);
  return Status::OK();
}

// The negative log-likelihood of the log-softmax of the scores over their class axis (1).
Status SoftmaxCrossEntropyLoss(NodeContext& c) {
  ASSIGN_OR_RETURN(Output scores, c.input(0));
  ASSIGN_OR_RETURN(Output labels, c.input(1));
  Output weight;
  if (c.has_input(2)) {
    ASSIGN_OR_RETURN(weight, c.input(2));
  }
  const int rank = scores.shape().rank();
  if (rank < 2) return InvalidArgument("scores {} must be [N, C] or [N, C, d...]", scores.shape());
  const Scope& s = c.scope();
  Output log_prob;
  if (rank == 2) {
    log_prob = ops::LogSoftmax(s, scores);
  } else {  // the class axis moved last and back
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[1], perm[rank - 1]);
    log_prob = ops::Transpose(s, ops::LogSoftmax(s, ops::Transpose(s, scores, perm)), perm);
  }
  ASSIGN_OR_RETURN(Output loss, NllLoss(c, log_prob, labels, c.has_input(2) ? &weight : nullptr));
  c.set_output(0, loss);
  c.set_output(1, log_prob);
  return Status::OK();
}

}  // namespace

void AddGatherConverters(std::map<std::string, Converter>& table) {
  table.insert({
      {"Gather", GatherOp<ops::Gather>},
      {"GatherElements", GatherOp<ops::GatherElements>},
      {"NegativeLogLikelihoodLoss", NegativeLogLikelihoodLoss},
      {"Scatter", ScatterElements},
      {"ScatterElements", ScatterElements},
      {"SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLoss},
  });
}

}  // namespace dflow::onnx
