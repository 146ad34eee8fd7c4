// The definitions (shape, cost, properties) and gradients of the random ops.
#include "ops/defs/op_defs.h"

namespace dflow::ops::internal {
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
  RETURN_IF_ERROR(
      r.Register({.name = "UniformLike",
                  .inputs = {{.name = "x", .type_attr = "T"}},
                  .outputs = {{.name = "y", .type_attr = "dtype", .allowed = kFloatTypes}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"dtype", AttrType::kDType, DType::kF64},
                            {"seed", AttrType::kInt, int64_t{0}}},
                  .stateful = true,
                  .shape_fn = [](InferenceContext& c) -> Status {
                    c.set_output(0, c.input_shape(0));
                    return Status::OK();
                  },
                  .cost_fn = ElementwiseCostFn(20),
                  .grad_fn = NoGradient}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
