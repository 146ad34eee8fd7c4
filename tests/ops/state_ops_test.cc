// Variable and Assign: shape inference, errors, and values that persist across runs.
#include "ops/state_ops.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

TEST(StateOpsTest, ShapesAndErrors) {
  Scope root = Scope::NewRootScope();
  auto v = ops::Variable(root.WithOpName("w"), Shape{2, 3});
  EXPECT_EQ(v.shape(), Shape({2, 3}));
  EXPECT_TRUE(v.node().op_def()->stateful);
  ops::Assign(root.WithOpName("bad_assign"), v,
              ops::Const(root, std::vector<float>(4, 0), Shape{4}));
  EXPECT_TRUE(MessageHas(root.status(), {"node 'bad_assign' (Assign)", "[4]", "'w'", "[2,3]"}));

  Scope r2 = Scope::NewRootScope();
  auto c = ops::Const(r2.WithOpName("c"), 1.0f);
  ops::Assign(r2.WithOpName("a"), c, c);
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'a' (Assign)", "'c' is a Const"}));

  Scope r3 = Scope::NewRootScope();
  ops::Variable(r3.WithOpName("partial"), Shape{-1, 2});
  EXPECT_TRUE(MessageHas(r3.status(), {"node 'partial' (Variable)", "fully defined"}));
}

TEST(StateOpsTest, ValuesPersistAcrossRuns) {
  Scope root = Scope::NewRootScope();
  auto v = ops::Variable(root.WithOpName("counter"), Shape{2});
  ops::Assign(root.WithOpName("init"), v, ops::Const(root, std::vector<float>{1, 10}, Shape{2}));
  auto step = ops::Assign(root.WithOpName("step"), v, ops::Add(root, v, ops::Const(root, 1.0f)));
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {"init"}).ok());
  for (int i = 1; i <= 3; ++i) {
    auto out = (*session)->Run({}, {step.name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->at(0).ToVector<float>(), std::vector<float>({1.0f + i, 10.0f + i}));
  }
  auto read = (*session)->Run({}, {v.name()});
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->at(0).ToVector<float>(), std::vector<float>({4, 13}));
  // A value fetched earlier is a snapshot: a later Assign writes to a fresh buffer.
  ASSERT_TRUE((*session)->Run({}, {}, {"init"}).ok());
  EXPECT_EQ(read->at(0).ToVector<float>(), std::vector<float>({4, 13}));
}

TEST(StateOpsTest, ReadingUninitialisedVariableNamesIt) {
  Scope root = Scope::NewRootScope();
  auto v = ops::Variable(root.WithOpName("weights"), Shape{2});
  auto y = ops::Relu(root.WithOpName("act"), v);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run({}, {y.name()});
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(out.status(), {"node 'act'", "variable 'weights'", "uninitialised"}));
  // Fetched itself, too: an error, not an empty tensor.
  auto fetched = (*session)->Run({}, {v.name()});
  EXPECT_EQ(fetched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(fetched.status(), {"variable 'weights'", "uninitialised"}))
      << fetched.status().ToString();
}

TEST(StateOpsTest, AssignWithoutShapeValidationTakesNewShape) {
  Scope root = Scope::NewRootScope();
  auto v = ops::Variable(root.WithOpName("v"), Shape{2});
  auto grow = ops::Assign(root, v, ops::Const(root, std::vector<float>{1, 2, 3}, Shape{3}),
                          {.validate_shape = false});
  auto out = testing::RunScope(root, {}, {grow});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({1, 2, 3}));
}

}  // namespace
}  // namespace dflow
