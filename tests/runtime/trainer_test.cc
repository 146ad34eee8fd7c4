// TrainLoop and Accuracy on a small separable problem; a non-finite loss stops training.
#include "runtime/trainer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

// Two classes: label 1 when feature 0 > feature 1.
Dataset Separable(int n) {
  Dataset d{Tensor(DType::kF32, Shape{n, 2}), Tensor(DType::kI32, Shape{n})};
  auto v = testing::RandomFloats(2 * n, 3, 0, 1);
  for (int i = 0; i < n; ++i) {
    d.images.data<float>()[2 * i] = v[2 * i];
    d.images.data<float>()[2 * i + 1] = v[2 * i + 1];
    d.labels.data<int32_t>()[i] = v[2 * i] > v[2 * i + 1];
  }
  return d;
}

struct Model {
  Scope root = Scope::NewRootScope();
  Output logits, loss;
  ops::Operation step;
  std::vector<std::string> init;

  explicit Model(double lr) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{2, 2},
                                      ops::Initializer::GlorotUniform(1));
    logits = ops::MatMul(root.WithOpName("logits"), x, w.var);
    loss = ops::ReduceMean(root.WithOpName("loss"),
                           ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
    ops::SGD sgd({.learning_rate = lr});
    step = sgd.Minimize(root, loss, {w.var});
    init = {w.init.node_name()};
  }
};

TEST(TrainerTest, LearnsASeparableProblem) {
  Dataset data = Separable(512);
  Model m(1.0);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  auto before = Accuracy(**s, data, "x", m.logits.name(), 100);
  ASSERT_TRUE(before.ok());
  Batcher batches(data, 32, 7);
  std::vector<EpochStats> seen;
  Status st = TrainLoop(
      **s, batches,
      {.epochs = 4, .loss = m.loss.name(), .train_target = m.step.name(), .progress = false},
      [&](const EpochStats& e) {
        seen.push_back(e);
        return Status::OK();
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].steps, 16);
  EXPECT_LT(seen[3].mean_loss, seen[0].mean_loss);
  auto after = Accuracy(**s, data, "x", m.logits.name(), 100);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(*after, 0.95);
}

TEST(TrainerTest, NonFiniteLossStopsWithEpochAndStep) {
  Dataset data = Separable(64);
  data.images.data<float>()[5] = std::nanf("");  // one bad pixel poisons the loss
  Model m(0.1);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  Batcher batches(data, 16, 1);
  Status st = TrainLoop(
      **s, batches,
      {.epochs = 3, .loss = m.loss.name(), .train_target = m.step.name(), .progress = false},
      nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(st, {"loss is", "epoch 1 step"}));
}

TEST(TrainerTest, StepErrorsComeBackUnchanged) {
  Dataset data = Separable(16);
  data.labels.data<int32_t>()[3] = 7;  // outside [0, 2)
  Model m(0.1);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  Batcher batches(data, 16, 1, /*shuffle=*/false);
  Status st =
      TrainLoop(**s, batches,
                {.loss = m.loss.name(), .train_target = m.step.name(), .progress = false}, nullptr);
  EXPECT_TRUE(MessageHas(st, {"SparseSoftmaxCrossEntropyWithLogits", "label 7 at row 3"}));
}

}  // namespace
}  // namespace dflow
