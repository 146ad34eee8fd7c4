#include "ops/random_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output RandomUniform(const Scope& scope, const Shape& shape, double minval, double maxval,
                     uint64_t seed, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("RandomUniform", {},
                                      {{"shape", shape},
                                       {"dtype", dtype},
                                       {"seed", static_cast<int64_t>(seed)},
                                       {"minval", minval},
                                       {"maxval", maxval}}));
}

Output RandomNormal(const Scope& scope, const Shape& shape, double mean, double stddev,
                    uint64_t seed, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("RandomNormal", {},
                                      {{"shape", shape},
                                       {"dtype", dtype},
                                       {"seed", static_cast<int64_t>(seed)},
                                       {"mean", mean},
                                       {"stddev", stddev}}));
}

Output UniformLike(const Scope& scope, Output x, uint64_t seed, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("UniformLike", {x}, {{"dtype", dtype}, {"seed", static_cast<int64_t>(seed)}}));
}

}  // namespace dflow::ops
