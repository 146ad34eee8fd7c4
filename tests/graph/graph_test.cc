// Graph validation: every bad-graph case is an InvalidArgument naming the node(s).
#include "graph/graph.h"

#include <gtest/gtest.h>

#include "ops/register.h"

namespace dflow {
namespace {

class GraphTest : public ::testing::Test {
 protected:
  void SetUp() override { ops::RegisterStandardOps(); }

  int Add(NodeDef def) {
    auto id = g_.AddNode(std::move(def));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : -1;
  }
  NodeDef Const(const std::string& name, Tensor value) {
    return {.name = name, .op = "Const", .attrs = {{"value", value}, {"dtype", value.dtype()}}};
  }
  void ExpectInvalid(const std::vector<std::string>& names) {
    Status s = g_.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    for (const auto& n : names) {
      EXPECT_NE(s.message().find("'" + n + "'"), std::string::npos)
          << "message should name '" << n << "': " << s.message();
    }
  }

  Graph g_;
};

TEST_F(GraphTest, ValidGraphInfersDtypesShapesAndOrder) {
  Add({.name = "y", .op = "Add", .inputs = {{"a", 0}, {"b", 0}}});  // inputs added later
  Add(Const("a", Tensor::FromVector<float>({1, 2, 3}, Shape{3})));
  Add(Const("b", Tensor::Scalar<float>(1)));
  ASSERT_TRUE(g_.Validate().ok());
  const Node& y = g_.node(*g_.FindNode("y"));
  EXPECT_EQ(y.output_dtype(0), DType::kF32);
  EXPECT_EQ(y.output_shape(0), Shape({3}));
  EXPECT_EQ(std::get<DType>(*y.FindAttr("T")), DType::kF32);
  const auto& order = g_.topological_order();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), y.id());
}

TEST_F(GraphTest, UnknownOp) {
  Add({.name = "mystery", .op = "FlyToMoon"});
  ExpectInvalid({"mystery", "FlyToMoon"});
}

TEST_F(GraphTest, WrongArity) {
  Add(Const("a", Tensor::Scalar<float>(1)));
  Add({.name = "sum", .op = "Add", .inputs = {{"a", 0}}});
  ExpectInvalid({"sum"});
  EXPECT_NE(g_.Validate().message().find("takes 2 inputs, got 1"), std::string::npos);
}

TEST_F(GraphTest, DtypeMismatch) {
  Add(Const("f", Tensor::Scalar<float>(1)));
  Add(Const("i", Tensor::Scalar<int32_t>(1)));
  Add({.name = "mixed", .op = "Add", .inputs = {{"f", 0}, {"i", 0}}});
  ExpectInvalid({"mixed"});
  EXPECT_NE(g_.Validate().message().find("dtype mismatch"), std::string::npos);
}

TEST_F(GraphTest, DisallowedDtype) {
  Add(Const("i", Tensor::FromVector<int32_t>({1, 2, 3, 4}, Shape{2, 2})));
  Add({.name = "mm", .op = "MatMul", .inputs = {{"i", 0}, {"i", 0}}});
  ExpectInvalid({"mm"});
}

TEST_F(GraphTest, DanglingInputToMissingNode) {
  Add({.name = "r", .op = "Relu", .inputs = {{"ghost", 0}}});
  ExpectInvalid({"r", "ghost"});
}

TEST_F(GraphTest, DanglingInputToMissingOutput) {
  Add(Const("a", Tensor::Scalar<float>(1)));
  Add({.name = "r", .op = "Relu", .inputs = {{"a", 3}}});
  ExpectInvalid({"r", "a"});
  EXPECT_NE(g_.Validate().message().find("has 1 output"), std::string::npos);
}

TEST_F(GraphTest, DanglingControlInput) {
  Add({.name = "n", .op = "NoOp", .control_inputs = {"nowhere"}});
  ExpectInvalid({"n", "nowhere"});
}

TEST_F(GraphTest, DuplicateNameIsRefused) {
  Add(Const("a", Tensor::Scalar<float>(1)));
  auto dup = g_.AddNode(Const("a", Tensor::Scalar<float>(2)));
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("duplicate node name 'a'"), std::string::npos);
  EXPECT_EQ(g_.num_nodes(), 1);
}

TEST_F(GraphTest, CycleNamesItsNodes) {
  Add(Const("c", Tensor::Scalar<float>(1)));
  Add({.name = "p", .op = "Add", .inputs = {{"c", 0}, {"q", 0}}});
  Add({.name = "q", .op = "Relu", .inputs = {{"p", 0}}});
  ExpectInvalid({"p", "q"});
  EXPECT_NE(g_.Validate().message().find("cycle"), std::string::npos);
}

TEST_F(GraphTest, ControlEdgeCycle) {
  Add({.name = "x", .op = "NoOp", .control_inputs = {"y"}});
  Add({.name = "y", .op = "NoOp", .control_inputs = {"x"}});
  ExpectInvalid({"x", "y"});
}

TEST_F(GraphTest, AttributeErrors) {
  Add({.name = "p", .op = "Placeholder"});
  ExpectInvalid({"p"});
  EXPECT_NE(g_.Validate().message().find("missing required attribute 'dtype'"), std::string::npos);

  Graph g2;
  ASSERT_TRUE(
      g2.AddNode({.name = "p", .op = "Placeholder", .attrs = {{"dtype", int64_t{3}}}}).ok());
  Status s = g2.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node 'p'"), std::string::npos);
  EXPECT_NE(s.message().find("attribute 'dtype' is int, expected dtype"), std::string::npos);

  Graph g3;
  ASSERT_TRUE(g3.AddNode({.name = "n", .op = "NoOp", .attrs = {{"colour", true}}}).ok());
  s = g3.Validate();
  EXPECT_NE(s.message().find("node 'n'"), std::string::npos);
  EXPECT_NE(s.message().find("unknown attribute 'colour'"), std::string::npos);
}

TEST_F(GraphTest, ShapeErrorNamesNode) {
  Add(Const("a", Tensor::FromVector<float>({1, 2, 3}, Shape{3})));
  Add(Const("b", Tensor::FromVector<float>({1, 2}, Shape{2})));
  Add({.name = "bad_add", .op = "Add", .inputs = {{"a", 0}, {"b", 0}}});
  ExpectInvalid({"bad_add"});
  EXPECT_NE(g_.Validate().message().find("do not broadcast"), std::string::npos);
}

// Declared sizes far beyond any memory are refused before anything multiplies them.
TEST_F(GraphTest, OutputsOfMoreThan2To48ElementsAreRefused) {
  Add({.name = "huge",
       .op = "Placeholder",
       .attrs = {{"dtype", DType::kF32},
                 {"shape", Shape{-1, int64_t{1} << 30, int64_t{1} << 30}}}});
  ExpectInvalid({"huge"});
  EXPECT_NE(g_.Validate().message().find("more than 2^48 elements"), std::string::npos);
  Graph ok;
  ASSERT_TRUE(ok.AddNode({.name = "big",
                          .op = "Placeholder",
                          .attrs = {{"dtype", DType::kF32},
                                    {"shape", Shape{-1, int64_t{1} << 24, int64_t{1} << 24}}}})
                  .ok());
  EXPECT_TRUE(ok.Validate().ok());  // 2^48 exactly, with an unknown batch
}

TEST_F(GraphTest, ConsumersListsDataAndControlEdges) {
  Add(Const("a", Tensor::Scalar<float>(1)));
  Add({.name = "r", .op = "Relu", .inputs = {{"a", 0}}});
  Add({.name = "n", .op = "NoOp", .control_inputs = {"a"}});
  ASSERT_TRUE(g_.Validate().ok());
  auto consumers = g_.Consumers();
  auto& of_a = consumers[*g_.FindNode("a")];
  ASSERT_EQ(of_a.size(), 2u);
  EXPECT_EQ(of_a[0], std::make_pair(*g_.FindNode("r"), 0));
  EXPECT_EQ(of_a[1], std::make_pair(*g_.FindNode("n"), -1));
}

TEST(InputRefTest, Parses) {
  auto r = ParseInputRef("layer1/w:2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node, "layer1/w");
  EXPECT_EQ(r->index, 2);
  EXPECT_EQ(ParseInputRef("x")->index, 0);
  for (const char* bad : {"x:", "x:-1", ":0", "x:1a", ""}) {
    EXPECT_EQ(ParseInputRef(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace dflow
