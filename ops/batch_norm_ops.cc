#include "ops/batch_norm_ops.h"

#include "ops/array_ops.h"
#include "ops/batch_norm_dims.h"
#include "ops/grad_ops.h"
#include "ops/math_ops.h"
#include "ops/op_definitions.h"
#include "ops/state_ops.h"

namespace dflow::ops {

BatchNormOutputs BatchNorm(const Scope& scope, Output x, Output scale, Output offset,
                           const BatchNormAttrs& attrs) {
  internal::RegisterOpDefinitions();
  int id = scope.AddNode("BatchNorm", {x, scale, offset}, {{"epsilon", attrs.epsilon}});
  return {scope.OutputOf(id, 0), scope.OutputOf(id, 1), scope.OutputOf(id, 2)};
}

Output BatchNormInference(const Scope& scope, Output x, Output scale, Output offset, Output mean,
                          Output variance, const BatchNormAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("BatchNormInference", {x, scale, offset, mean, variance},
                                      {{"epsilon", attrs.epsilon}}));
}

BatchNormGradOutputs BatchNormGrad(const Scope& scope, Output dy, Output x, Output scale,
                                   Output mean, Output variance, const BatchNormAttrs& attrs) {
  internal::RegisterOpDefinitions();
  int id =
      scope.AddNode("BatchNormGrad", {dy, x, scale, mean, variance}, {{"epsilon", attrs.epsilon}});
  return {scope.OutputOf(id, 0), scope.OutputOf(id, 1), scope.OutputOf(id, 2)};
}

std::vector<Output> UpdateRunningStats(const Scope& scope, const BatchNormOutputs& batch, Output x,
                                       Output running_mean, Output running_var, double momentum) {
  if (!scope.CheckInputs("UpdateRunningStats", {batch.mean, batch.variance, x})) return {};
  const Shape& xs = x.shape();
  if (xs.unknown_rank()) {
    scope.UpdateStatus(InvalidArgument(
        "UpdateRunningStats: the rank of '{}' must be known to count its elements per channel",
        x.name()));
    return {};
  }
  DType t = x.dtype();
  // count / (count - 1) makes the batch variance unbiased; count is per channel.
  std::vector<int64_t> axes = NonChannelAxes(xs.rank());
  int64_t count = 1;
  for (int64_t a : axes) count = (count < 0 || xs[a] < 0) ? -1 : count * xs[a];
  Output unbiased;
  if (count > 1) {
    unbiased =
        Mul(scope, batch.variance, ScalarConst(scope, t, static_cast<double>(count) / (count - 1)));
  } else {  // the count is known only at run time: read from x's shape, not a pass over x
    Output n = ElementCount(scope, x, axes);
    Output one = ScalarConst(scope, t, 1);
    unbiased = Div(scope, Mul(scope, batch.variance, n), Maximum(scope, Sub(scope, n, one), one));
  }
  auto blend = [&](Output running, Output value) {
    return Add(scope, Mul(scope, running, ScalarConst(scope, t, 1 - momentum)),
               Mul(scope, value, ScalarConst(scope, t, momentum)));
  };
  return {Assign(scope, running_mean, blend(running_mean, batch.mean)),
          Assign(scope, running_var, blend(running_var, unbiased))};
}

}  // namespace dflow::ops
