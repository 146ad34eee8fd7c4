// Placement pass 3a: chain merging.
#include "placer/coarsen.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "placer/placer.h"

namespace dflow {
namespace {

struct Built {
  Graph graph;
  DeviceSet devices;
  Constraints constraints;
  CostModel costs;
};

Built Build(const Scope& root, int devices) {
  Graph g = root.graph();
  EXPECT_TRUE(g.Validate().ok());
  Built b{std::move(g), DeviceSet::LocalCpus(devices).value(), {}, {}};
  b.constraints = ApplyHardConstraints(b.graph, b.devices).value();
  b.costs = CostModel::Build(b.graph, b.devices).value();
  return b;
}

int GroupOf(const Built& b, const std::string& name) {
  return b.constraints.group_of[*b.graph.FindNode(name)];
}

TEST(CoarsenTest, CheapSingleConsumerChainsJoinTheirConsumer) {
  // x -> a -> b -> c, with c read twice; big matmul inputs p, q feed an expensive product.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{16});
  auto a = ops::Neg(root.WithOpName("a"), x);
  auto b = ops::Neg(root.WithOpName("b"), a);
  auto c = ops::Neg(root.WithOpName("c"), b);
  ops::Neg(root.WithOpName("d"), c);
  ops::Neg(root.WithOpName("e"), c);
  auto p = ops::Placeholder(root.WithOpName("p"), DType::kF32, Shape{512, 512});
  auto big = ops::MatMul(root.WithOpName("big"), p, p);
  ops::Neg(root.WithOpName("after_big"), big);
  Built built = Build(root, 2);
  int before = static_cast<int>(built.constraints.groups.size());
  int merges = MergeChains(built.graph, built.devices, built.costs, &built.constraints);
  // x, a and b have one consumer each and are cheap: x, a, b, c form one group.
  EXPECT_EQ(GroupOf(built, "x"), GroupOf(built, "c"));
  EXPECT_EQ(GroupOf(built, "b"), GroupOf(built, "c"));
  // c has two consumers; the matmul (one consumer) costs far more than sending its output.
  EXPECT_NE(GroupOf(built, "c"), GroupOf(built, "d"));
  EXPECT_NE(GroupOf(built, "d"), GroupOf(built, "e"));
  EXPECT_NE(GroupOf(built, "big"), GroupOf(built, "after_big"));
  EXPECT_GE(merges, 3);
  EXPECT_EQ(static_cast<int>(built.constraints.groups.size()), before - merges);
  // Groups list their members ascending, and every node is in the group that lists it.
  for (size_t k = 0; k < built.constraints.groups.size(); ++k) {
    const auto& members = built.constraints.groups[k].members;
    EXPECT_TRUE(std::is_sorted(members.begin(), members.end()));
    for (int v : members) EXPECT_EQ(built.constraints.group_of[v], static_cast<int>(k));
  }
  // Placement keeps the chain on one device.
  auto report = Place(built.graph, built.devices).value();
  int dx = report.device_of[*built.graph.FindNode("x")];
  for (const char* n : {"a", "b", "c"}) EXPECT_EQ(report.device_of[*built.graph.FindNode(n)], dx);
  EXPECT_EQ(report.chain_merges, merges);
}

TEST(CoarsenTest, RequestsDecideWhatMayMergeAndOneDeviceMergesNothing) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{16});
  auto a = ops::Neg(root.WithOpName("a").WithDevice("cpu:1"), x);  // disjoint from x
  auto b = ops::Neg(root.WithOpName("b"), a);                      // any device
  ops::Neg(root.WithOpName("c").WithDevice("cpu:1"), b);
  Built built = Build(root, 3);
  MergeChains(built.graph, built.devices, built.costs, &built.constraints);
  EXPECT_NE(GroupOf(built, "x"), GroupOf(built, "a"));
  EXPECT_EQ(GroupOf(built, "a"), GroupOf(built, "c"));
  // The merged group keeps only the devices its members share.
  EXPECT_EQ(built.constraints.groups[GroupOf(built, "b")].candidates, std::vector<int>{1});

  Scope chain = Scope::NewRootScope();
  ops::Neg(chain.WithOpName("n"), ops::Placeholder(chain.WithOpName("y"), DType::kF32, Shape{4}));
  Built one = Build(chain, 1);
  EXPECT_EQ(MergeChains(one.graph, one.devices, one.costs, &one.constraints), 0);
}

}  // namespace
}  // namespace dflow
