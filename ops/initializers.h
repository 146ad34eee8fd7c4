// Variable initialisers: zeros, constant, uniform, normal, Glorot (Xavier) uniform and He
// normal, each with an explicit seed where random.
//
//   auto w = ops::InitializedVariable(root.WithOpName("w1"), Shape{784, 512},
//                                     ops::Initializer::GlorotUniform(/*seed=*/1));
//   session->Run({}, {}, {w.init.node_name()});  // or run all of them with a grouping NoOp
#pragma once

#include <cstdint>

#include "graph/scope.h"

namespace dflow::ops {

struct Initializer {
  enum class Kind { kZeros, kConstant, kUniform, kNormal, kGlorotUniform, kHeNormal };
  Kind kind = Kind::kZeros;
  double a = 0, b = 0;  // constant value; uniform [a, b); normal mean a, stddev b
  uint64_t seed = 0;

  static Initializer Zeros() { return {}; }
  static Initializer Constant(double v) { return {Kind::kConstant, v}; }
  static Initializer Uniform(double lo, double hi, uint64_t seed) {
    return {Kind::kUniform, lo, hi, seed};
  }
  static Initializer Normal(double mean, double stddev, uint64_t seed) {
    return {Kind::kNormal, mean, stddev, seed};
  }
  // Uniform in +-sqrt(6 / (fan_in + fan_out)).
  static Initializer GlorotUniform(uint64_t seed) { return {Kind::kGlorotUniform, 0, 0, seed}; }
  // Normal with stddev sqrt(2 / fan_in).
  static Initializer HeNormal(uint64_t seed) { return {Kind::kHeNormal, 0, 0, seed}; }
};

// fan_in and fan_out of a weight: [in, out] for a matrix, [out, in, kh, kw] for a convolution,
// [n] for a vector (both n).
std::pair<double, double> Fans(const Shape& shape);

// The initial value of a tensor of `shape` (fully defined) as a graph node.
Output InitialValue(const Scope& scope, const Shape& shape, const Initializer& init,
                    DType dtype = DType::kF32);

struct VariableAndInit {
  Output var;   // the Variable
  Output init;  // Assign(var, initial value): run it once before reading var
};
VariableAndInit InitializedVariable(const Scope& scope, const Shape& shape, const Initializer& init,
                                    DType dtype = DType::kF32);

}  // namespace dflow::ops
