// The checks every session runs on a Run (runtime/run_signature.h): one text per error,
// whichever session gets the Run.
#include "runtime/run_signature.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

Graph TwoOutputs() {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2});
  auto parts = ops::Split(root.WithOpName("halves"), x, 2, 1);
  ops::Neg(root.WithOpName("y"), parts[0]);
  Graph g = root.graph();
  EXPECT_TRUE(g.Validate().ok());
  return g;
}

TEST(RunSignatureTest, KeysTellSignaturesApartWhateverTheNamesHold) {
  Tensor t = Tensor::FromVector<float>({1, 2}, Shape{1, 2});
  EXPECT_EQ(SignatureKey({{"x", t}}, {"y"}, {}), SignatureKey({{"x", Tensor()}}, {"y"}, {}));
  EXPECT_NE(SignatureKey({{"x", t}}, {"y"}, {}), SignatureKey({{"x", t}}, {}, {"y"}));
  EXPECT_NE(SignatureKey({}, {"a,b"}, {}), SignatureKey({}, {"a", "b"}, {}));
  EXPECT_NE(SignatureKey({}, {"a|"}, {"b"}), SignatureKey({}, {"a"}, {"|b"}));
  EXPECT_NE(SignatureKey({}, {"y", "y:0"}, {}), SignatureKey({}, {"y:0", "y"}, {}));
}

TEST(RunSignatureTest, FeedsAreCheckedAgainstTheirPlaceholders) {
  Graph g = TwoOutputs();
  Tensor good = Tensor::FromVector<float>({1, 2, 3, 4}, Shape{2, 2});
  auto fed = CheckRun(g, {{"x:0", good}}, {"y"}, {});
  ASSERT_TRUE(fed.ok()) << fed.status().ToString();
  EXPECT_EQ(*fed, std::vector<int>{*g.FindNode("x")});

  struct Bad {
    Feeds feeds;
    StatusCode code;
    std::vector<std::string> words;
  };
  for (const Bad& b : std::vector<Bad>{
           {{{"nope", good}}, StatusCode::kNotFound, {"feed 'nope'", "no node named 'nope'"}},
           {{{"y", good}}, StatusCode::kInvalidArgument, {"node 'y' is a Neg", "Placeholder"}},
           {{{"x:1", good}}, StatusCode::kInvalidArgument, {"only output 0"}},
           {{{"x", Tensor()}}, StatusCode::kInvalidArgument, {"feed 'x'", "empty"}},
           {{{"x", Tensor::FromVector<int32_t>({1, 2}, Shape{1, 2})}},
            StatusCode::kInvalidArgument,
            {"placeholder 'x' is f32", "i32"}},
           {{{"x", Tensor::FromVector<float>({1, 2, 3}, Shape{1, 3})}},
            StatusCode::kInvalidArgument,
            {"shape [?,2]", "[1,3]"}},
           {{{"x", good}, {"x:0", good}}, StatusCode::kInvalidArgument, {"fed twice"}}}) {
    auto s = CheckRun(g, b.feeds, {"y"}, {});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), b.code) << s.status().ToString();
    EXPECT_TRUE(MessageHas(s.status(), b.words)) << s.status().ToString();
  }
  auto nothing = CheckRun(g, {{"x", good}}, {}, {});
  EXPECT_TRUE(MessageHas(nothing.status(), {"at least one fetch or target"}))
      << nothing.status().ToString();
}

TEST(RunSignatureTest, FetchesAndTargetsResolveToNodeIds) {
  Graph g = TwoOutputs();
  auto spec = ResolveRun(g, {{"x", Tensor()}}, {"halves:1", "y"}, {"y"}, false);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->feeds, std::vector<int>{*g.FindNode("x")});
  ASSERT_EQ(spec->fetches.size(), 2u);
  EXPECT_EQ(spec->fetches[0], (Endpoint{*g.FindNode("halves"), 1}));
  EXPECT_EQ(spec->fetches[1], (Endpoint{*g.FindNode("y"), 0}));
  EXPECT_EQ(spec->targets, std::vector<int>{*g.FindNode("y")});
  EXPECT_FALSE(spec->plan_memory);

  auto no_output = ResolveRun(g, {}, {"y:1"}, {});
  EXPECT_EQ(no_output.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(no_output.status(), {"fetch 'y:1'", "node 'y' (Neg) has 1 output"}))
      << no_output.status().ToString();
  auto no_fetch = ResolveRun(g, {}, {"z"}, {});
  EXPECT_EQ(no_fetch.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(no_fetch.status(), {"fetch 'z'"})) << no_fetch.status().ToString();
  auto no_target = ResolveRun(g, {}, {}, {"t"});
  EXPECT_EQ(no_target.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(no_target.status(), {"target 't'"})) << no_target.status().ToString();
}

}  // namespace
}  // namespace dflow
