// A step's signature split per partition (partition/partition_share.h): what every partition of a
// local session, the distributed master and the worker compile from.
#include "partition/partition_share.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "partition/partition.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

// x -> a = Neg(x) on cpu:0; b = a + y on cpu:1; step: feeds x, y; fetches b, a, b; target a.
struct Split {
  Graph graph;
  DeviceSet set;
  PlanSpec spec;
  std::vector<Graph> parts;
  Split() {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
    auto y = ops::Placeholder(root.WithOpName("y"), DType::kF32, Shape{2});
    auto a = ops::Neg(root.WithOpName("a"), x);
    ops::Add(root.WithOpName("b"), a, y);
    graph = root.graph();
    EXPECT_TRUE(graph.Validate().ok());
    set = DeviceSet::LocalCpus(2).value();
    std::vector<int> device_of(graph.num_nodes(), 0);
    device_of[*graph.FindNode("y")] = 1;
    device_of[*graph.FindNode("b")] = 1;
    spec.feeds = {*graph.FindNode("x"), *graph.FindNode("y")};
    const int b = *graph.FindNode("b");
    spec.fetches = {{b, 0}, {*graph.FindNode("a"), 0}, {b, 0}};
    spec.targets = {*graph.FindNode("a")};
    auto partitioned = PartitionGraph(graph, set, device_of);
    EXPECT_TRUE(partitioned.ok()) << partitioned.status().ToString();
    for (int i = 0; i < 2; ++i) parts.push_back(*BuildPartitionGraph(graph, set, *partitioned, i));
  }
};

TEST(PartitionShareTest, EachPartitionHoldsItsFeedsFetchesAndTargets) {
  Split s;
  PartitionShare first = ShareOf(s.graph, s.spec, s.parts[0]);
  ASSERT_EQ(first.feeds.size(), 1u);
  EXPECT_EQ(first.feeds[0].index, 0);
  EXPECT_EQ(first.feeds[0].node, "x");
  ASSERT_EQ(first.fetches.size(), 1u);
  EXPECT_EQ(first.fetches[0].index, 1);
  EXPECT_EQ(first.fetches[0].node, "a");
  EXPECT_EQ(first.targets, std::vector<std::string>{"a"});

  PartitionShare second = ShareOf(s.graph, s.spec, s.parts[1]);
  ASSERT_EQ(second.feeds.size(), 1u);
  EXPECT_EQ(second.feeds[0].index, 1);
  ASSERT_EQ(second.fetches.size(), 2u);  // b, fetched twice
  EXPECT_EQ(second.fetches[0].index, 0);
  EXPECT_EQ(second.fetches[1].index, 2);
  EXPECT_TRUE(second.targets.empty());

  // Bound to its graph: the same nodes, and the partition's Send runs as a target.
  auto bound = BindShare(s.parts[0], first, 2, 3, true, /*run_sends=*/true, "partition 0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->feeds, std::vector<int>{*s.parts[0].FindNode("x")});
  int sends = 0;
  for (int t : bound->targets) sends += s.parts[0].node(t).op() == "_Send";
  EXPECT_EQ(sends, 1);
  auto whole = BindShare(s.parts[0], first, 2, 3, true, /*run_sends=*/false, "partition 0");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->targets, std::vector<int>{*s.parts[0].FindNode("a")});
}

TEST(PartitionShareTest, AShareFromAnotherProcessIsCheckedEntryByEntry) {
  Split s;
  const PartitionShare good = ShareOf(s.graph, s.spec, s.parts[1]);
  struct Bad {
    const char* what;
    std::function<void(PartitionShare&)> spoil;
    std::vector<std::string> words;
  };
  for (const Bad& b : std::vector<Bad>{
           {"feed index", [](PartitionShare& p) { p.feeds[0].index = 2; }, {"feed 2", "2 feeds"}},
           {"negative", [](PartitionShare& p) { p.feeds[0].index = -1; }, {"feed -1"}},
           {"feed twice", [](PartitionShare& p) { p.feeds.push_back(p.feeds[0]); }, {"twice"}},
           {"not a placeholder",
            [](PartitionShare& p) { p.feeds[0].node = "b"; },
            {"feed 'b' is not a placeholder"}},
           {"fetch index", [](PartitionShare& p) { p.fetches[0].index = 3; }, {"fetch 3"}},
           {"fetch output",
            [](PartitionShare& p) { p.fetches[0].output = 1; },
            {"fetch 'b:1' is not an output"}},
           {"no node", [](PartitionShare& p) { p.fetches[0].node = "gone"; }, {"'gone:0'"}},
           {"target",
            [](PartitionShare& p) { p.targets = {"a"}; },
            {"target 'a' is not a node"}}}) {
    PartitionShare share = good;
    b.spoil(share);
    auto bound = BindShare(s.parts[1], share, 2, 3, true, true, "partition 1 from task 7");
    ASSERT_FALSE(bound.ok()) << b.what;
    EXPECT_EQ(bound.status().code(), StatusCode::kInvalidArgument) << b.what;
    std::vector<std::string> words = b.words;
    words.push_back("partition 1 from task 7");
    EXPECT_TRUE(MessageHas(bound.status(), words)) << b.what << ": " << bound.status().ToString();
  }
}

}  // namespace
}  // namespace dflow
