// The small model the data-parallel and mixed-precision tests train: a two-layer MLP and
// reproducible batches.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"

namespace dflow {

// How an Mlp differs from the data-parallel tests' one. `hand_cast`: its products written as
// Cast(x) x Cast(w) in that dtype, cast back to f32 (kInvalid: plain f32; the mixed-precision
// tests' reference). The loss is scaled by `loss_factor` (a tiny one makes f16 gradients
// underflow); `lr` > 0 replaces the optimizer's rate.
struct MlpOptions {
  DType hand_cast = DType::kInvalid;
  double loss_factor = 1;
  double lr = 0;
};

// A two-layer MLP on [batch, 8] inputs and 4 classes, trained by SGD or Adam. `state`: Adam's
// slots (m, v and step of each variable).
struct Mlp {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> init, variables, state;
  std::string loss, step;
  explicit Mlp(bool adam, const MlpOptions& o = {}) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    const int64_t sizes[] = {8, 16, 4};
    for (int l = 0; l < 2; ++l) {
      auto w = ops::InitializedVariable(root.WithOpName(fmt::format("w{}", l)),
                                        Shape{sizes[l], sizes[l + 1]},
                                        ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(root.WithOpName(fmt::format("b{}", l)), Shape{sizes[l + 1]},
                                        ops::Initializer::Constant(0.1));
      vars.insert(vars.end(), {w.var, b.var});
      init.insert(init.end(), {w.init.node_name(), b.init.node_name()});
      Output product = o.hand_cast == DType::kInvalid
                           ? ops::MatMul(root, h, w.var)
                           : ops::Cast(root,
                                       ops::MatMul(root, ops::Cast(root, h, o.hand_cast),
                                                   ops::Cast(root, w.var, o.hand_cast)),
                                       DType::kF32);
      h = ops::BiasAdd(root, product, b.var);
      if (l == 0) h = ops::Relu(root, h);
    }
    Output xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, h, y).loss;
    Output l = o.loss_factor == 1 ? ops::ReduceMean(root.WithOpName("loss"), xent)
                                  : ops::Mul(root.WithOpName("loss"), ops::ReduceMean(root, xent),
                                             ops::Const(root, static_cast<float>(o.loss_factor)));
    loss = l.node_name();
    for (const Output& v : vars) variables.push_back(v.node_name());
    if (adam) {
      ops::Adam opt({.learning_rate = o.lr > 0 ? o.lr : 0.01});
      step = opt.Minimize(root, l, vars).name();
      init.insert(init.end(), opt.init_targets().begin(), opt.init_targets().end());
      for (const auto& v : variables) {
        for (const char* slot : {"m", "v", "step"}) {
          state.push_back(fmt::format("{}/update/{}", v, slot));
        }
      }
    } else {
      ops::SGD opt({.learning_rate = o.lr > 0 ? o.lr : 0.5});
      step = opt.Minimize(root, l, vars).name();
    }
  }
  // The graph, validated.
  Graph graph() const {
    Graph g = root.graph();
    EXPECT_TRUE(g.Validate().ok());
    return g;
  }
};

// Batch `step` of `rows` rows, inputs in [-magnitude, magnitude); with `poison` one is NaN.
inline Session::Feeds Batch(int step, int rows, bool poison = false, float magnitude = 1) {
  std::mt19937 gen(step + 17);
  Tensor x(DType::kF32, Shape{rows, 8}), y(DType::kI32, Shape{rows});
  for (float& v : x.flat<float>()) {
    v = std::uniform_real_distribution<float>(-magnitude, magnitude)(gen);
  }
  for (int i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 4);
  if (poison) x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  return {{"x", x}, {"labels", y}};
}

}  // namespace dflow
