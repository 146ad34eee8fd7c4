// Builder functions for batch normalisation over axis 1 (channels) of an [N, C, ...] tensor
// (rank 2 to 5; NCHW for images). Statistics are taken over every axis but the channel axis.
//
//   auto bn = ops::BatchNorm(s, x, scale, offset);                       // training
//   auto upd = ops::UpdateRunningStats(s, bn, x, running_mean, running_var);  // run with the step
//   auto y = ops::BatchNormInference(s, x, scale, offset, running_mean, running_var);  // eval
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

struct BatchNormAttrs {
  double epsilon = 1e-5;
};

struct BatchNormOutputs {
  Output y;         // (x - mean) / sqrt(variance + epsilon) * scale + offset
  Output mean;      // [C], the batch mean
  Output variance;  // [C], the biased batch variance (divided by the count, not count - 1)
};

// Training mode: normalises with the batch's own statistics. scale and offset are [C]. The
// gradient flows to x, scale and offset; asking for one through mean or variance is an
// InvalidArgument naming the node.
BatchNormOutputs BatchNorm(const Scope& scope, Output x, Output scale, Output offset,
                           const BatchNormAttrs& attrs = {});

// Inference mode: normalises with given statistics (usually the running averages), all [C].
// Differentiable with respect to every input.
Output BatchNormInference(const Scope& scope, Output x, Output scale, Output offset, Output mean,
                          Output variance, const BatchNormAttrs& attrs = {});

// The gradients of BatchNorm in training mode: dx, dscale, doffset.
struct BatchNormGradOutputs {
  Output dx, dscale, doffset;
};
BatchNormGradOutputs BatchNormGrad(const Scope& scope, Output dy, Output x, Output scale,
                                   Output mean, Output variance, const BatchNormAttrs& attrs = {});

// Assigns running = (1 - momentum) * running + momentum * batch for the mean and the variance
// (PyTorch's convention; the batch variance is made unbiased, times count / (count - 1)).
// running_mean and running_var are Variables of shape [C]. Returns the two Assign outputs: run
// them as targets with every training step.
std::vector<Output> UpdateRunningStats(const Scope& scope, const BatchNormOutputs& batch, Output x,
                                       Output running_mean, Output running_var,
                                       double momentum = 0.1);

}  // namespace dflow::ops
