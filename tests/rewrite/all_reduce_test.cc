// AllReduce's ring of graph nodes over in-process devices: every replica's result against a
// plain loop over the fed values (integer-valued, so any order of additions is exact).
#include "rewrite/all_reduce.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "ops/array_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::Devices;
using testing::MessageHas;

struct Case {
  int replicas;
  Shape shape;
  ops::AllReduceOptions options;
};

std::string CpuName(int r) { return fmt::format("cpu:{}", r); }

// Feeds integer values in [-50, 50], runs the all-reduce and checks every replica's output.
void Check(const Case& c) {
  std::string hosts;
  for (const auto& h : c.options.hosts) hosts += h;
  SCOPED_TRACE(::testing::Message()
               << c.replicas << " replicas of " << c.shape.ToString() << " on hosts '" << hosts
               << "', chunk_bytes " << c.options.chunk_bytes << ", "
               << (c.options.reduction == ops::Reduction::kMean ? "mean" : "sum"));
  Scope root = Scope::NewRootScope();
  std::vector<Output> values;
  std::vector<std::string> devices;
  for (int r = 0; r < c.replicas; ++r) {
    devices.push_back(CpuName(r));
    values.push_back(ops::Placeholder(root.WithOpName(fmt::format("x{}", r)).WithDevice(CpuName(r)),
                                      DType::kF32, c.shape));
  }
  std::vector<Output> out = ops::AllReduce(root, values, devices, c.options);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  ASSERT_EQ(out.size(), static_cast<size_t>(c.replicas));

  std::mt19937 gen(c.replicas * 1000 + static_cast<int>(c.shape.num_elements()));
  Session::Feeds feeds;
  const int64_t n = c.shape.num_elements();
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < c.replicas; ++r) {
    Tensor t(DType::kF32, c.shape);
    for (int64_t i = 0; i < n; ++i) {
      t.data<float>()[i] = static_cast<float>(static_cast<int>(gen() % 101) - 50);
      want[i] += t.data<float>()[i];
    }
    feeds.emplace_back(fmt::format("x{}", r), t);
  }
  if (c.options.reduction == ops::Reduction::kMean) {
    for (float& w : want) w *= 1.0f / static_cast<float>(c.replicas);
  }
  auto session = Session::Create(root, Devices(c.replicas));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<std::string> fetches;
  for (const Output& o : out) fetches.push_back(o.name());
  auto got = (*session)->Run(feeds, fetches);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (int r = 0; r < c.replicas; ++r) {
    const Tensor& t = (*got)[r];
    ASSERT_EQ(t.shape(), c.shape) << "replica " << r;
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (t.data<float>()[i] != want[i]) {
        if (wrong++ == 0) first = i;
      }
    }
    EXPECT_EQ(wrong, 0) << "replica " << r << ": first wrong element " << first << " is "
                        << (first >= 0 ? t.data<float>()[first] : 0) << ", want "
                        << (first >= 0 ? want[first] : 0);
  }
  // Every value of replica r reaches the others only through its ring neighbour: the graph
  // crosses devices (n >= 2) through Send/Recv pairs.
  if (c.replicas > 1) {
    EXPECT_GT((*session)->placement().cross_edges, 0);
  }
  if (c.options.hosts.empty()) return;
  // Across hosts only the first replica of each host sends or receives.
  const Graph& g = root.graph();
  std::map<std::string, int> replica_of;  // requested device -> replica
  for (int r = 0; r < c.replicas; ++r) {
    replica_of[g.node(*g.FindNode(fmt::format("x{}", r))).requested_device()] = r;
  }
  auto leader = [&](int r) {
    for (int q = 0; q < r; ++q) {
      if (c.options.hosts[q] == c.options.hosts[r]) return false;
    }
    return true;
  };
  int between_hosts = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    auto to = replica_of.find(g.node(id).requested_device());
    if (to == replica_of.end()) continue;
    for (const Endpoint& in : g.node(id).inputs()) {
      auto from = replica_of.find(g.node(in.node).requested_device());
      if (from == replica_of.end() ||
          c.options.hosts[from->second] == c.options.hosts[to->second]) {
        continue;
      }
      ++between_hosts;
      EXPECT_TRUE(leader(from->second) && leader(to->second))
          << g.node(in.node).name() << " -> " << g.node(id).name();
    }
  }
  EXPECT_GT(between_hosts, 0);
}

TEST(AllReduceTest, SumsExactlyForEveryReplicaCountAndSize) {
  // Sizes that do not divide by the replica count, smaller than it, and a few MiB.
  for (int replicas : {1, 2, 3, 4}) {
    for (const Shape& shape : {Shape{1}, Shape{2}, Shape{3}, Shape{5}, Shape{7, 3}, Shape{1000, 3},
                               Shape{(1 << 20) + 3}}) {
      Check({replicas, shape, {}});
    }
  }
}

TEST(AllReduceTest, SixtyFourMebibytesSumExactly) {
  Check({2, Shape{(16 << 20) + 1}, {ops::Reduction::kSum, 4 << 20}});  // 64 MiB and 4 bytes
}

TEST(AllReduceTest, ChunkedRingsGiveTheSameSums) {
  for (int replicas : {2, 3}) {
    // One element a chunk; a few chunks a segment; one chunk a segment.
    Check({replicas, Shape{37}, {ops::Reduction::kSum, 4}});
    for (int64_t chunk : {int64_t{4096}, int64_t{1} << 20}) {
      Check({replicas, Shape{257, 129}, {ops::Reduction::kSum, chunk}});
    }
  }
}

TEST(AllReduceTest, MeanDividesByTheReplicaCount) {
  for (int replicas : {2, 3, 4}) {
    Check({replicas, Shape{1}, {ops::Reduction::kMean}});
    Check({replicas, Shape{999}, {ops::Reduction::kMean, 1024}});
  }
}

// On several hosts each host sums first: the results are the flat ring's, and only one replica
// per host talks to other hosts.
TEST(AllReduceTest, HostsSumInsideFirstThenRingBetweenLeaders) {
  using Hosts = std::vector<std::string>;
  for (const Hosts& hosts : {Hosts{"a", "a", "b", "b"}, Hosts{"a", "b", "b"},
                             Hosts{"a", "a", "a", "b"}, Hosts{"b", "a", "b", "a"}}) {
    const int n = static_cast<int>(hosts.size());
    for (const Shape& shape : {Shape{1}, Shape{5}, Shape{1000, 3}}) {
      Check({n, shape, {ops::Reduction::kSum, 0, hosts}});
      Check({n, shape, {ops::Reduction::kMean, 1024, hosts}});
    }
  }
}

TEST(AllReduceTest, TwoAllReducesInOneGraphKeepApart) {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> devices = {"cpu:0", "cpu:1"};
  auto a0 = ops::Const(root.WithDevice("cpu:0"), std::vector<float>{1, 2}, Shape{2});
  auto a1 = ops::Const(root.WithDevice("cpu:1"), std::vector<float>{10, 20}, Shape{2});
  auto b0 = ops::Const(root.WithDevice("cpu:0"), std::vector<float>{3}, Shape{1});
  auto b1 = ops::Const(root.WithDevice("cpu:1"), std::vector<float>{4}, Shape{1});
  auto a = ops::AllReduce(root, {a0, a1}, devices);
  auto b = ops::AllReduce(root, {b0, b1}, devices, {ops::Reduction::kMean});
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto got = (*session)->Run({}, {a[1].name(), b[0].name()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].data<float>()[0], 11);
  EXPECT_EQ((*got)[0].data<float>()[1], 22);
  EXPECT_EQ((*got)[1].data<float>()[0], 3.5f);
}

TEST(AllReduceTest, BadValuesAreInvalidArgumentNamingThem) {
  auto error = [](std::vector<Shape> shapes, std::vector<std::string> devices,
                  ops::AllReduceOptions options = {}, DType dtype = DType::kF32) {
    Scope root = Scope::NewRootScope();
    std::vector<Output> values;
    for (size_t i = 0; i < shapes.size(); ++i) {
      values.push_back(ops::Placeholder(root.WithOpName(fmt::format("v{}", i)), dtype, shapes[i]));
    }
    EXPECT_TRUE(ops::AllReduce(root, values, devices, options).empty());
    return root.status();
  };
  Status s = error({Shape{4}, Shape{5}}, {"cpu:0", "cpu:1"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(s, {"'v1:0'", "f32[5]", "'v0:0'", "f32[4]"})) << s.ToString();
  s = error({Shape{4}, Shape{4}}, {"cpu:0"});
  EXPECT_TRUE(MessageHas(s, {"2 values", "1 devices"})) << s.ToString();
  s = error({Shape{-1, 4}, Shape{-1, 4}}, {"cpu:0", "cpu:1"});
  EXPECT_TRUE(MessageHas(s, {"'v0:0'", "every dimension must be known"})) << s.ToString();
  s = error({Shape{4}, Shape{4}}, {"cpu:0", "cpu:1"}, {ops::Reduction::kMean}, DType::kI32);
  EXPECT_TRUE(MessageHas(s, {"'v0:0'", "f32 or f64", "i32"})) << s.ToString();
  s = error({}, {});
  EXPECT_TRUE(MessageHas(s, {"at least one value"})) << s.ToString();
  s = error({Shape{4}, Shape{4}}, {"cpu:0", "cpu:1"}, {ops::Reduction::kSum, -1});
  EXPECT_TRUE(MessageHas(s, {"chunk_bytes is -1"})) << s.ToString();
  s = error({Shape{4}, Shape{4}}, {"cpu:0", "cpu:1"}, {ops::Reduction::kSum, 0, {"a"}});
  EXPECT_TRUE(MessageHas(s, {"2 values but 1 hosts"})) << s.ToString();
}

}  // namespace
}  // namespace dflow
