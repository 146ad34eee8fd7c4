// Session: feed, fetch and target checks with their messages, plan caching, device requests.
#include "runtime/session.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/register.h"
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
  bad.device = "gpu:0";  // no GPU device type in a CPU build
  auto no_gpu = Session::Create(ok, bad);
  EXPECT_EQ(no_gpu.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(no_gpu.status(), {"'gpu:0'", "GPU", "types: CPU"}))
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
