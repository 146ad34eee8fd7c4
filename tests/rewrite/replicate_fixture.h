// The small model the data-parallel tests train: a two-layer MLP and reproducible batches.
#pragma once

#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/session.h"

namespace dflow {

// A two-layer MLP on [batch, 8] inputs and 4 classes, trained by SGD or Adam.
struct Mlp {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> init, variables;
  std::string loss, step;
  explicit Mlp(bool adam) {
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
      h = ops::BiasAdd(root, ops::MatMul(root, h, w.var), b.var);
      if (l == 0) h = ops::Relu(root, h);
    }
    loss = ops::ReduceMean(root.WithOpName("loss"),
                           ops::SparseSoftmaxCrossEntropyWithLogits(root, h, y).loss)
               .node_name();
    for (const Output& v : vars) variables.push_back(v.node_name());
    if (adam) {
      ops::Adam opt({.learning_rate = 0.01});
      step = opt.Minimize(root, Output(&root.graph(), root.graph().FindNode(loss).value(), 0), vars)
                 .name();
      init.insert(init.end(), opt.init_targets().begin(), opt.init_targets().end());
    } else {
      ops::SGD opt({.learning_rate = 0.5});
      step = opt.Minimize(root, Output(&root.graph(), root.graph().FindNode(loss).value(), 0), vars)
                 .name();
    }
  }
};

inline Session::Feeds Batch(int step, int rows) {
  std::mt19937 gen(step + 17);
  Tensor x(DType::kF32, Shape{rows, 8}), y(DType::kI32, Shape{rows});
  for (float& v : x.flat<float>()) v = std::uniform_real_distribution<float>(-1, 1)(gen);
  for (int i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 4);
  return {{"x", x}, {"labels", y}};
}

}  // namespace dflow
