#include "ops/random_ops.h"

#include "ops/op_defs.h"

namespace dflow::ops {
namespace internal {
namespace {

Status RandomShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(Shape s, c.GetAttr<Shape>("shape"));
  if (!s.fully_defined()) return c.Error("shape must be fully defined, got {}", s);
  c.set_output(0, s);
  return Status::OK();
}

OpDef Random(const std::string& name, const char* a, const char* b) {
  return {.name = name,
          .outputs = {{.name = "y", .type_attr = "dtype", .allowed = kFloatTypes}},
          .attrs = {{"shape", AttrType::kShape, std::nullopt},
                    {"dtype", AttrType::kDType, DType::kF32},
                    {"seed", AttrType::kInt, int64_t{0}},
                    {a, AttrType::kFloat, std::nullopt},
                    {b, AttrType::kFloat, std::nullopt}},
          .shape_fn = RandomShape,
          .cost_fn = ElementwiseCostFn(20)};
}

}  // namespace

Status RegisterRandomOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register(Random("RandomUniform", "minval", "maxval")));
  RETURN_IF_ERROR(r.Register(Random("RandomNormal", "mean", "stddev")));
  return Status::OK();
}

}  // namespace internal

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

}  // namespace dflow::ops
