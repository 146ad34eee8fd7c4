#include "ops/initializers.h"

#include <cmath>

#include "ops/array_ops.h"
#include "ops/random_ops.h"
#include "ops/state_ops.h"

namespace dflow::ops {

std::pair<double, double> Fans(const Shape& shape) {
  if (shape.rank() <= 0) return {1, 1};
  if (shape.rank() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.rank() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1;
  for (int i = 2; i < shape.rank(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

Output InitialValue(const Scope& scope, const Shape& shape, const Initializer& init, DType dtype) {
  auto [fan_in, fan_out] = Fans(shape);
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      return Fill(scope, shape, 0, dtype);
    case Initializer::Kind::kConstant:
      return Fill(scope, shape, init.a, dtype);
    case Initializer::Kind::kUniform:
      return RandomUniform(scope, shape, init.a, init.b, init.seed, dtype);
    case Initializer::Kind::kNormal:
      return RandomNormal(scope, shape, init.a, init.b, init.seed, dtype);
    case Initializer::Kind::kGlorotUniform: {
      double limit = std::sqrt(6.0 / (fan_in + fan_out));
      return RandomUniform(scope, shape, -limit, limit, init.seed, dtype);
    }
    case Initializer::Kind::kHeNormal:
      return RandomNormal(scope, shape, 0, std::sqrt(2.0 / fan_in), init.seed, dtype);
  }
  return Output();
}

VariableAndInit InitializedVariable(const Scope& scope, const Shape& shape, const Initializer& init,
                                    DType dtype) {
  Output var = Variable(scope, shape, dtype);
  if (!var.valid()) return {};
  // Initialisation nodes go under the variable's name: "w1/initial_value", "w1/init".
  Scope under = scope.WithNameScope(var.node_name().substr(scope.name_prefix().size()));
  Output value = InitialValue(under.WithOpName("initial_value"), shape, init, dtype);
  return {var, Assign(under.WithOpName("init"), var, value)};
}

}  // namespace dflow::ops
