// Session: feed, fetch and target checks with their messages, plan caching, device requests.
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/register.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = ops::Placeholder(root_.WithOpName("x"), DType::kF32, Shape{-1, 2});
    auto k = ops::Const(root_.WithOpName("k"), 3.0f);
    y_ = ops::Mul(root_.WithOpName("y"), x_, k);
    auto s = Session::Create(root_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(s).value();
  }
  Tensor X(int rows) {
    std::vector<float> v(rows * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    return Tensor::FromVector<float>(v, Shape{rows, 2});
  }

  Scope root_ = Scope::NewRootScope();
  Output x_, y_;
  std::unique_ptr<Session> session_;
};

TEST_F(SessionTest, RunsAndCachesPlans) {
  for (int rows : {1, 4, 7}) {
    auto out = session_->Run({{"x", X(rows)}}, {"y"});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (int i = 0; i < rows * 2; ++i) EXPECT_EQ(out->at(0).data<float>()[i], 3.0f * i);
  }
  EXPECT_EQ(session_->num_plans(), 1);
  ASSERT_TRUE(session_->Run({{"x:0", X(1)}}, {"y:0", "x"}).ok());
  EXPECT_EQ(session_->num_plans(), 2);
}

TEST_F(SessionTest, FeedErrors) {
  auto unknown = session_->Run({{"nope", X(1)}}, {"y"});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(unknown.status(), {"'nope'"}));

  auto not_placeholder = session_->Run({{"k", Tensor::Scalar<float>(1)}}, {"y"});
  EXPECT_EQ(not_placeholder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(not_placeholder.status(), {"'k' is a Const, not a Placeholder"}));

  auto dtype = session_->Run({{"x", Tensor(DType::kI32, Shape{1, 2})}}, {"y"});
  EXPECT_EQ(dtype.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(dtype.status(), {"placeholder 'x' is f32", "i32"}));

  auto shape = session_->Run({{"x", Tensor(DType::kF32, Shape{2, 3})}}, {"y"});
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(shape.status(), {"placeholder 'x' has shape [?,2]", "[2,3]"}));

  auto twice = session_->Run({{"x", X(1)}, {"x:0", X(1)}}, {"y"});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(twice.status(), {"fed twice"}));

  auto empty = session_->Run({{"x", Tensor()}}, {"y"});
  EXPECT_TRUE(MessageHas(empty.status(), {"feed 'x'", "empty"}));

  auto unfed = session_->Run({}, {"y"});
  EXPECT_EQ(unfed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(unfed.status(), {"placeholder 'x'", "must be fed"}));
}

TEST_F(SessionTest, FetchAndTargetErrors) {
  auto missing = session_->Run({{"x", X(1)}}, {"z:0"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"fetch 'z:0'", "'z'"}));

  auto index = session_->Run({{"x", X(1)}}, {"y:4"});
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(index.status(), {"node 'y' (Mul) has 1 output"}));

  auto malformed = session_->Run({{"x", X(1)}}, {"y:one"});
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);

  auto target = session_->Run({}, {}, {"ghost"});
  EXPECT_EQ(target.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(target.status(), {"target 'ghost'"}));

  EXPECT_EQ(session_->Run({}, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(SessionCreateTest, ScopeErrorComesBackUnchanged) {
  Scope root = Scope::NewRootScope();
  ops::MatMul(root.WithOpName("broken"), ops::Const(root, 1.0f), ops::Const(root, 1.0f));
  auto s = Session::Create(root);
  EXPECT_EQ(s.status(), root.status());
  EXPECT_TRUE(MessageHas(s.status(), {"node 'broken'"}));
}

TEST(SessionCreateTest, InvalidGraphNamesNode) {
  Graph g;
  ASSERT_TRUE(g.AddNode({.name = "lonely", .op = "Relu", .inputs = {{"missing", 0}}}).ok());
  auto s = Session::Create(std::move(g));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(s.status(), {"node 'lonely'", "'missing'"}));
}

TEST(SessionCreateTest, DeviceRequestsCheckedAgainstTheSessionDevice) {
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithDevice("gpu:0").WithOpName("on_gpu"), 1.0f);
  auto s = Session::Create(root);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(s.status(), {"node 'on_gpu'", "/device:GPU:0", "CPU:0"}));

  Scope ok = Scope::NewRootScope();
  ops::Const(ok.WithDevice("cpu").WithOpName("c"), 1.0f);
  EXPECT_TRUE(Session::Create(ok).ok());
  SessionOptions bad;
  // A GPU past those this process has: where there is no GPU the type itself is missing.
  const auto types = DeviceFactory::Global().types();
  const bool has_gpu = std::count(types.begin(), types.end(), "GPU") > 0;
  bad.device = "gpu:63";
  auto no_gpu = Session::Create(ok, bad);
  EXPECT_EQ(no_gpu.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(no_gpu.status(),
                         has_gpu ? std::vector<std::string>{"GPU:63", "GPU(s)"}
                                 : std::vector<std::string>{"'gpu:63'", "GPU", "types: CPU"}))
      << no_gpu.status().ToString();
  bad.device = "cpu:x";
  EXPECT_EQ(Session::Create(ok, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(SessionCreateTest, MissingKernelIsNotFoundNamingNode) {
  ops::RegisterStandardOps();
  static bool registered = [] {
    Status s = OpRegistry::Global().Register({.name = "TestOnlyNoKernel",
                                              .outputs = {{.name = "out", .fixed = DType::kF32}},
                                              .shape_fn = [](InferenceContext& c) {
                                                c.set_output(0, Shape{});
                                                return Status::OK();
                                              }});
    return s.ok();
  }();
  ASSERT_TRUE(registered);
  Graph g;
  ASSERT_TRUE(g.AddNode({.name = "orphan", .op = "TestOnlyNoKernel"}).ok());
  auto s = Session::Create(std::move(g));
  ASSERT_TRUE(s.ok());
  auto out = (*s)->Run({}, {"orphan"});
  EXPECT_EQ(out.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(out.status(), {"node 'orphan'", "no CPU kernel"}));
}

}  // namespace
}  // namespace dflow

namespace dflow {
namespace {

// A two-layer classifier trained with SGD on a fixed batch.
struct SmallNet {
  Scope root = Scope::NewRootScope();
  Output logits, loss;
  ops::Operation step;
  std::vector<std::string> init;
  Session::Feeds feeds;
  SmallNet() {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto w1 = ops::InitializedVariable(root.WithOpName("w1"), Shape{8, 16},
                                       ops::Initializer::GlorotUniform(1));
    auto w2 = ops::InitializedVariable(root.WithOpName("w2"), Shape{16, 4},
                                       ops::Initializer::GlorotUniform(2));
    init = {w1.init.node_name(), w2.init.node_name()};
    logits = ops::MatMul(root, ops::Relu(root, ops::MatMul(root, x, w1.var)), w2.var);
    loss = ops::ReduceMean(root.WithOpName("loss"),
                           ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels).loss);
    ops::SGD sgd({.learning_rate = 0.05});
    step = sgd.Minimize(root, loss, {w1.var, w2.var});
    std::vector<float> xs = testing::RandomFloats(32 * 8, 7);
    std::vector<int32_t> ys(32);
    for (int i = 0; i < 32; ++i) ys[i] = (xs[i * 8] > 0) + 2 * (xs[i * 8 + 1] > 0);
    feeds = {{"x", Tensor::FromVector<float>(xs, Shape{32, 8})},
             {"labels", Tensor::FromVector<int32_t>(ys, Shape{32})}};
  }
};

// Training steps from several threads at once on one session: every run succeeds, the updates
// all land (the loss falls as far as the same number of steps from one thread takes it), and
// concurrent inference runs agree bit for bit with a run made alone.
TEST(SessionConcurrencyTest, ConcurrentTrainingAndInferenceRuns) {
  SmallNet net;
  auto session = Session::Create(net.root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, net.init).ok());
  auto first = (*session)->Run(net.feeds, {net.loss.name()});
  ASSERT_TRUE(first.ok());
  const float initial = first->at(0).data<float>()[0];

  constexpr int kThreads = 3, kSteps = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kSteps; ++i) {
        auto r = (*session)->Run(net.feeds, {net.loss.name()}, {net.step.name()});
        if (!r.ok() || !std::isfinite(r->at(0).data<float>()[0])) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto trained = (*session)->Run(net.feeds, {net.loss.name()});
  ASSERT_TRUE(trained.ok());
  const float after = trained->at(0).data<float>()[0];
  EXPECT_LT(after, initial * 0.8f) << "initial " << initial;

  // Inference from several threads at once matches a lone run exactly.
  auto alone = (*session)->Run(net.feeds, {net.logits.name()});
  ASSERT_TRUE(alone.ok());
  std::atomic<int> mismatches{0};
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto r = (*session)->Run(net.feeds, {net.logits.name()});
        if (!r.ok() || !r->at(0).BitwiseEquals(alone->at(0))) mismatches++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Compiling one signature does not hold up runs of another: a run of a compiled signature
// completes while another thread compiles a large one.
TEST(SessionConcurrencyTest, CompilingOneSignatureDoesNotBlockOthers) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto small = ops::Neg(root.WithOpName("small"), x);
  Output big = x;
  for (int i = 0; i < 20000; ++i) big = ops::Neg(root, big);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  Session::Feeds feeds = {{"x", Tensor::FromVector<float>({1, 2}, Shape{2})}};
  ASSERT_TRUE((*session)->Run(feeds, {small.name()}).ok());
  std::atomic<bool> compiling_done{false};
  std::thread compile([&] {
    EXPECT_TRUE((*session)->Run(feeds, {big.name()}).ok());
    compiling_done = true;
  });
  int runs_while_compiling = 0;
  while (!compiling_done) {
    auto r = (*session)->Run(feeds, {small.name()});
    ASSERT_TRUE(r.ok());
    if (!compiling_done) runs_while_compiling++;
  }
  compile.join();
  EXPECT_GT(runs_while_compiling, 0);
  EXPECT_EQ((*session)->num_plans(), 2);
}

}  // namespace
}  // namespace dflow
