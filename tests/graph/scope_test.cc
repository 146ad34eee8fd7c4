// The builder API: names, name scopes, devices, colocation, control dependencies, and the first
// error kept by the scope.
#include "graph/scope.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"

namespace dflow {
namespace {

TEST(ScopeTest, NamesAreUniqueAndScoped) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, 1.0f);
  auto b = ops::Const(root, 2.0f);
  auto layer = root.WithNameScope("layer1");
  auto c = ops::Add(layer, a, b);
  auto d = ops::Add(layer.WithOpName("out"), c, c);
  EXPECT_EQ(a.node_name(), "Const");
  EXPECT_EQ(b.node_name(), "Const_1");
  EXPECT_EQ(c.node_name(), "layer1/Add");
  EXPECT_EQ(d.node_name(), "layer1/out");
  EXPECT_EQ(d.name(), "layer1/out:0");
  EXPECT_TRUE(root.ok());
}

// A scope over a graph made elsewhere goes on building it: its nodes keep their names and are
// found by name; new nodes avoid the names taken.
TEST(ScopeTest, ExtendGraphBuildsOnAGraphMadeElsewhere) {
  Scope first = Scope::NewRootScope();
  auto a = ops::Const(first.WithOpName("a"), 2.0f);
  ops::Relu(first, a);
  Scope root = Scope::ExtendGraph(first.graph());
  auto found = root.FindOutput("a:0");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->node_name(), "a");
  auto relu = ops::Relu(root, *found);
  EXPECT_EQ(relu.node_name(), "Relu_1");
  EXPECT_EQ(root.graph().num_nodes(), 3);
  EXPECT_EQ(first.graph().num_nodes(), 2);  // a copy was extended
  EXPECT_EQ(root.FindOutput("a").value().index(), 0);
  auto missing = root.FindOutput("b:0");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no node 'b'"), std::string::npos);
  auto past = root.FindOutput("a:1");
  EXPECT_EQ(past.status().code(), StatusCode::kNotFound);
  EXPECT_NE(past.status().message().find("node 'a' (Const) has 1 outputs"), std::string::npos);
  EXPECT_EQ(root.FindOutput("a:x").status().code(), StatusCode::kInvalidArgument);
}

TEST(ScopeTest, DeviceColocationAndControlDependencies) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root.WithDevice("cpu:1"), 1.0f);
  EXPECT_EQ(a.node().requested_device(), "/device:CPU:1");
  auto b = ops::Relu(root.WithColocation(a), a);
  EXPECT_EQ(b.node().colocation_group(), a.node_name());
  EXPECT_EQ(root.graph().node(a.node_id()).colocation_group(), a.node_name());
  auto n = ops::NoOp(root.WithControlDependencies({a, b}));
  ASSERT_TRUE(n.valid());
  EXPECT_EQ(n.node.node().control_inputs().size(), 2u);
}

TEST(ScopeTest, ShapeErrorAtBuildTimeNamesNodeAndIsKept) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  auto bad = ops::MatMul(root.WithOpName("bad_mm"), a, a);
  EXPECT_FALSE(bad.valid());
  EXPECT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(root.status().message().find("node 'bad_mm' (MatMul)"), std::string::npos);
  EXPECT_NE(root.status().message().find("inner dimensions differ"), std::string::npos);
  // Later calls chain: they do nothing and the first error stays.
  auto later = ops::Relu(root, ops::Add(root.WithOpName("z"), bad, a));
  EXPECT_FALSE(later.valid());
  EXPECT_NE(root.status().message().find("bad_mm"), std::string::npos);
  EXPECT_FALSE(root.graph().FindNode("bad_mm").has_value());
  // An invalid output answers kInvalid and an unknown shape (reading them crashed before).
  EXPECT_EQ(bad.dtype(), DType::kInvalid);
  EXPECT_TRUE(bad.shape().unknown_rank());
}

TEST(ScopeTest, BadDeviceAndDuplicateName) {
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithDevice("tpu:0"), 1.0f);
  EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(root.status().message().find("'tpu:0'"), std::string::npos);

  Scope other = Scope::NewRootScope();
  ops::Const(other.WithOpName("x"), 1.0f);
  ops::Const(other.WithOpName("x"), 2.0f);
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("duplicate node name 'x'"), std::string::npos);
}

}  // namespace
}  // namespace dflow
