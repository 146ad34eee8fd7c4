// The wide MLP of the model-parallel benchmarks (placer_bench, distributed_bench): 784-2048-
// 2048-10 with Adam, trained at batch 128 on a fixed random batch. Its weights and Adam state
// (70 MB) do not fit one 72 MiB device.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/session.h"

namespace dflow::bench {

struct WideMlp {
  Scope root = Scope::NewRootScope();
  Output loss;
  ops::Operation step;
  std::vector<std::string> init;
  // Hidden layers of `width` units; Adam, or SGD with learning rate 0.01 (the MLP of
  // models_bench and the data-parallel benchmark: width 512).
  explicit WideMlp(int64_t width = 2048, bool adam = true) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    const int64_t sizes[] = {784, width, width, 10};
    for (int l = 0; l < 3; ++l) {
      auto w = ops::InitializedVariable(root, Shape{sizes[l], sizes[l + 1]},
                                        ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(root, Shape{sizes[l + 1]}, ops::Initializer::Zeros());
      vars.insert(vars.end(), {w.var, b.var});
      init.insert(init.end(), {w.init.node_name(), b.init.node_name()});
      h = ops::BiasAdd(root, ops::MatMul(root, h, w.var), b.var);
      if (l < 2) h = ops::Relu(root, h);
    }
    loss = ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, h, labels).loss);
    if (adam) {
      ops::Adam optimizer({});
      step = optimizer.Minimize(root, loss, vars);
      init.insert(init.end(), optimizer.init_targets().begin(), optimizer.init_targets().end());
    } else {
      step = ops::SGD({.learning_rate = 0.01}).Minimize(root, loss, vars);
    }
  }
  static Session::Feeds Batch() {
    Tensor images(DType::kF32, Shape{128, 784}), y(DType::kI32, Shape{128});
    std::mt19937 gen(1);
    for (float& v : images.flat<float>()) v = std::uniform_real_distribution<float>(0, 1)(gen);
    for (int i = 0; i < 128; ++i) y.data<int32_t>()[i] = i % 10;
    return {{"x", images}, {"labels", y}};
  }
};

// The pipeline benchmarks' model and batch (placer_bench's BM_PipelineStep, distributed_bench's
// BM_PipelineStep2Proc): training it needs about twice one device's kPipelineLimit.
inline constexpr int kPipelineLayers = 4;
inline constexpr int64_t kPipelineWidth = 1024, kPipelineInputs = 1536;
inline constexpr int64_t kPipelineBatch = 1024;
inline constexpr double kPipelineLimit = 64.0 * (1 << 20);

// The pipeline benchmark's model: `layers` dense layers (ReLU) of width `width` and a 10-way
// head on [batch, inputs] inputs, Adam. A layer's work is its forward product and its weight
// gradient's, and its input gradient's except in the first layer: with inputs = 1.5 x width
// the first layer costs what the others do, so four layers cut into two equal stages.
struct DeepMlp {
  Scope root = Scope::NewRootScope();
  Output loss;
  ops::Operation step;
  std::vector<std::string> init;
  int64_t inputs;
  DeepMlp(int layers, int64_t width, int64_t inputs) : inputs(inputs) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, inputs});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    for (int l = 0; l <= layers; ++l) {
      const int64_t in = l == 0 ? inputs : width, out = l == layers ? 10 : width;
      auto w =
          ops::InitializedVariable(root, Shape{in, out}, ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(root, Shape{out}, ops::Initializer::Zeros());
      vars.insert(vars.end(), {w.var, b.var});
      init.insert(init.end(), {w.init.node_name(), b.init.node_name()});
      h = ops::BiasAdd(root, ops::MatMul(root, h, w.var), b.var);
      if (l < layers) h = ops::Relu(root, h);
    }
    loss = ops::ReduceMean(root.WithOpName("loss"),
                           ops::SparseSoftmaxCrossEntropyWithLogits(root, h, labels).loss);
    ops::Adam optimizer({});
    step = optimizer.Minimize(root, loss, vars);
    init.insert(init.end(), optimizer.init_targets().begin(), optimizer.init_targets().end());
  }
  Session::Feeds Batch(int64_t rows) const {
    Tensor images(DType::kF32, Shape{rows, inputs}), y(DType::kI32, Shape{rows});
    std::mt19937 gen(1);
    for (float& v : images.flat<float>()) v = std::uniform_real_distribution<float>(0, 1)(gen);
    for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
    return {{"x", images}, {"labels", y}};
  }
};

}  // namespace dflow::bench
