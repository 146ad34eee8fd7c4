// Mixed precision as a graph rewrite: a training graph (a loss, an optimizer's Minimize, as the
// examples build them) runs its products in bf16 or f16 while the variables (master weights),
// the reductions, normalisations, the loss and the updates stay f32, as PyTorch's autocast and
// TensorFlow's auto mixed precision do.
//
//   - Each node of `ops` (the forward products and the backward ones that Gradients made) whose
//     dtype is f32 runs in `compute`: its f32 inputs are cast to it (one Cast per tensor, shared
//     by every converted reader: a weight is cast once for the forward product and the
//     backward one), and its output is cast back to f32 under the node's own name, so every
//     reader, fetch and control input of the node sees what it saw. The converted node is
//     "NAME/bf16" (or "NAME/f16"); a converted node that reads another's output directly reads
//     its half-precision value (the cast back and forth is the identity).
//   - Loss scaling (for f16, whose gradients underflow below 6e-8): the gradient seed of `loss`
//     (the OnesLike that Gradients adds; every replica's, below) is multiplied by a scale and every
//     update's gradient by its inverse, so the products see gradients `scale` times larger. kStatic
//     keeps `initial_scale`. kDynamic keeps the scale in a variable (mixed_precision/loss_scale)
//     and checks the step's gradients (AllFinite): a step whose gradients hold an infinity or a NaN
//     is skipped (every update becomes its gated twin, ApplyAdamIf, ..., which then leaves its
//     variables, moments and step counter as they were) and the scale is multiplied by
//     `backoff_factor`; after `growth_interval` good steps in a row it is multiplied by
//     `growth_factor` where that stays finite (PyTorch's GradScaler: 2^16, 2, 0.5, 2000).
//
// The scale's variables are initialised by `init_targets` (run them once, with the optimizer's).
// With data parallelism apply it after Replicate (rewrite/replicate.h): every replica's seed (of
// its share of the loss, which `loss`, their mean, is computed from) is scaled, and one check
// of replica 0's averaged gradients (the other replicas' are the same, all-reduced) gates every
// replica's updates, so the replicas skip a step together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

struct MixedPrecisionOptions {
  DType compute = DType::kBF16;  // kBF16 or kF16
  // The ops run in `compute` (where their dtype is f32).
  std::vector<std::string> ops = {"MatMul", "BatchMatMul", "Conv2D", "Conv2DBackpropInput",
                                  "Conv2DBackpropFilter"};
  enum class LossScaling { kNone, kStatic, kDynamic };
  LossScaling loss_scaling = LossScaling::kNone;
  std::string loss;  // the loss node (or its output, "loss:0"); required with loss scaling
  double initial_scale = 65536;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

struct MixedPrecisionGraph {
  std::shared_ptr<Graph> graph;  // validated
  int converted = 0;             // nodes that run in `compute`
  int casts = 0;                 // Cast nodes added
  // With loss scaling: the scale (a variable with kDynamic, a Const with kStatic), fetchable.
  std::string loss_scale;
  // kDynamic: a bool scalar, whether this step's gradients were finite (the step applied).
  std::string grads_finite;
  std::vector<std::string> init_targets;  // kDynamic: initialise the scale and its count
};

// `training` may be validated already or not. Errors (InvalidArgument unless said): a compute
// dtype other than bf16 or f16; a graph that fails validation; loss scaling without a loss, or a
// scale or factor that is not positive and finite (backoff in (0, 1], growth >= 1, interval >=
// 1); NotFound naming a loss the graph lacks; a loss without a gradient seed (a graph not made by
// Gradients) or without an update reading a gradient; Unimplemented naming a stateful node that
// reads a gradient and has no gated twin (kDynamic).
Result<MixedPrecisionGraph> MixedPrecision(const Graph& training,
                                           const MixedPrecisionOptions& options);

}  // namespace dflow::ops
