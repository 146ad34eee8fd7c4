// The MLP 784-H-H-10 with SGD that the distributed tests train, each layer pinned: the first on
// `first`, the rest (with the loss) on `rest`; and random batches for it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/session.h"

namespace dflow::distributed::test_mlp {

struct Mlp {
  Scope root = Scope::NewRootScope();
  Output loss;
  ops::Operation step;
  std::vector<std::string> init;
  std::vector<Output> weights;
  Mlp(const std::string& first, const std::string& rest, int64_t hidden = 64) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    int64_t sizes[] = {784, hidden, hidden, 10};
    for (int l = 0; l < 3; ++l) {
      Scope s = root.WithDevice(l == 0 ? first : rest);
      auto w = ops::InitializedVariable(s, Shape{sizes[l], sizes[l + 1]},
                                        ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(s, Shape{sizes[l + 1]}, ops::Initializer::Zeros());
      vars.insert(vars.end(), {w.var, b.var});
      weights.push_back(w.var);
      init.insert(init.end(), {w.init.node_name(), b.init.node_name()});
      h = ops::BiasAdd(s, ops::MatMul(s, h, w.var), b.var);
      if (l < 2) h = ops::Relu(s, h);
    }
    Scope s = root.WithDevice(rest);
    loss = ops::ReduceMean(s, ops::SparseSoftmaxCrossEntropyWithLogits(s, h, y).loss);
    ops::SGD sgd({.learning_rate = 0.1});
    step = sgd.Minimize(root, loss, vars);  // updates go where their variables are
  }
};

// `n` random images and labels, the same for the same seed.
inline Session::Feeds MlpBatch(int seed, int64_t n = 32) {
  Tensor x(DType::kF32, Shape{n, 784}), y(DType::kI32, Shape{n});
  std::mt19937 gen(seed);
  for (float& v : x.flat<float>()) v = std::uniform_real_distribution<float>(0, 1)(gen);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 10);
  return {{"x", x}, {"labels", y}};
}

// Initialises `dist` (a session over `model`'s graph) and the same MLP in a session of one
// device, then trains both `steps` steps on the same batches, expecting the same loss each step
// (to 1e-5, relative); `hidden` is `model`'s. The one-device session, in step with `dist` (its
// nodes have `model`'s names), or null after a failure.
inline std::unique_ptr<Session> TrainsAsOnOneDevice(Session& dist, const Mlp& model, int steps = 4,
                                                    int64_t hidden = 64) {
  Mlp one("", "", hidden);
  auto local = Session::Create(one.root);
  EXPECT_TRUE(local.ok()) << local.status().ToString();
  if (!local.ok()) return nullptr;
  Status s = dist.Run({}, {}, model.init).status();
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = (*local)->Run({}, {}, one.init).status();
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (int i = 0; i < steps; ++i) {
    auto feeds = MlpBatch(i);
    auto d = dist.Run(feeds, {model.loss.name()}, {model.step.name()});
    auto l = (*local)->Run(feeds, {one.loss.name()}, {one.step.name()});
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!d.ok() || !l.ok()) return nullptr;
    const float ll = (*l)[0].data<float>()[0];
    EXPECT_NEAR((*d)[0].data<float>()[0], ll, 1e-5f * std::max(1.0f, std::abs(ll))) << "step " << i;
  }
  return std::move(local).value();
}

}  // namespace dflow::distributed::test_mlp
