// PartitionGraph: one subgraph per device joined by Send/Recv pairs, one pair per (tensor,
// destination device) however many nodes read the tensor there, control edges as pairs that
// carry an empty tensor, the pairs' attributes, and the errors.
#include "partition/partition.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

std::string Cpu(int i) { return DeviceName::Full("localhost", 0, "CPU", i).ToString(); }

// x, a on cpu:0; a read by b and c on cpu:1 and by d on cpu:2; e on cpu:1 adds b and c and
// waits on x (a control edge across devices); out on cpu:0 adds e and a.
struct Fixture {
  Graph graph;
  std::vector<int> device_of;

  Fixture() {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{4, 8});
    auto a = ops::Neg(root.WithOpName("a"), x);
    auto b = ops::Tanh(root.WithOpName("b"), a);
    auto c = ops::Neg(root.WithOpName("c"), a);
    ops::Identity(root.WithOpName("d"), a);
    auto e = ops::Add(root.WithOpName("e").WithControlDependencies({x}), b, c);
    ops::Add(root.WithOpName("out"), e, a);
    graph = root.graph();
    EXPECT_TRUE(graph.Validate().ok());
    device_of.assign(graph.num_nodes(), 0);
    for (auto [name, device] : {std::pair{"b", 1}, {"c", 1}, {"e", 1}, {"d", 2}}) {
      device_of[*graph.FindNode(name)] = device;
    }
  }
};

// A partition built into its own graph, as compiling one does.
struct Built {
  int device;
  Graph graph;
};
std::vector<Built> BuildAll(const Graph& g, const DeviceSet& devices,
                            const PartitionedGraph& parts) {
  std::vector<Built> out;
  for (int i = 0; i < static_cast<int>(parts.partitions.size()); ++i) {
    auto built = BuildPartitionGraph(g, devices, parts, i);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    out.push_back({parts.partitions[i].device, built.ok() ? std::move(*built) : Graph()});
  }
  return out;
}

const Node& NodeIn(const Built& p, const std::string& name) {
  auto id = p.graph.FindNode(name);
  EXPECT_TRUE(id.has_value()) << name << " not in the partition for device " << p.device;
  return p.graph.node(id.value_or(0));
}

std::vector<std::string> NodesOfOp(const Built& p, const std::string& op) {
  std::vector<std::string> names;
  for (int v = 0; v < p.graph.num_nodes(); ++v) {
    if (p.graph.node(v).op() == op) names.push_back(p.graph.node(v).name());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> InputNames(const Built& p, const Node& node) {
  std::vector<std::string> names;
  for (const Endpoint& e : node.inputs()) {
    names.push_back(p.graph.node(e.node).name() + ":" + std::to_string(e.index));
  }
  return names;
}

TEST(PartitionTest, OnePairPerTensorAndDestinationDevice) {
  Fixture f;
  DeviceSet devices = DeviceSet::LocalCpus(3).value();
  auto parts = PartitionGraph(f.graph, devices, f.device_of);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<Built> built = BuildAll(f.graph, devices, *parts);
  ASSERT_EQ(parts->partitions.size(), 3u);
  const Built &p0 = built[0], &p1 = built[1], &p2 = built[2];
  EXPECT_EQ(p0.device, 0);
  EXPECT_EQ(p1.device, 1);
  EXPECT_EQ(p2.device, 2);
  // a:0 to cpu:1 (read there by b and c: one pair) and to cpu:2; e:0 back to cpu:0; the
  // control edge x -> e.
  EXPECT_EQ(parts->send_recv_pairs, 4);
  EXPECT_EQ(
      NodesOfOp(p0, "_Send"),
      (std::vector<std::string>{"a/_send_0_to_cpu1", "a/_send_0_to_cpu2", "x/_send_ctl_to_cpu1"}));
  EXPECT_EQ(NodesOfOp(p0, "_Recv"), (std::vector<std::string>{"e/_recv_0_on_cpu0"}));
  EXPECT_EQ(NodesOfOp(p1, "_Recv"),
            (std::vector<std::string>{"a/_recv_0_on_cpu1", "x/_recv_ctl_on_cpu1"}));
  EXPECT_EQ(NodesOfOp(p1, "_Send"), (std::vector<std::string>{"e/_send_0_to_cpu0"}));
  EXPECT_EQ(NodesOfOp(p2, "_Recv"), (std::vector<std::string>{"a/_recv_0_on_cpu2"}));
  EXPECT_TRUE(NodesOfOp(p2, "_Send").empty());
  // Both readers on cpu:1 read the one Recv; local edges stay as they were.
  EXPECT_EQ(InputNames(p1, NodeIn(p1, "b")), (std::vector<std::string>{"a/_recv_0_on_cpu1:0"}));
  EXPECT_EQ(InputNames(p1, NodeIn(p1, "c")), (std::vector<std::string>{"a/_recv_0_on_cpu1:0"}));
  EXPECT_EQ(InputNames(p1, NodeIn(p1, "e")), (std::vector<std::string>{"b:0", "c:0"}));
  EXPECT_EQ(InputNames(p2, NodeIn(p2, "d")), (std::vector<std::string>{"a/_recv_0_on_cpu2:0"}));
  EXPECT_EQ(InputNames(p0, NodeIn(p0, "out")),
            (std::vector<std::string>{"e/_recv_0_on_cpu0:0", "a:0"}));
  EXPECT_EQ(InputNames(p0, NodeIn(p0, "a/_send_0_to_cpu1")), (std::vector<std::string>{"a:0"}));
  // Every original node is in exactly one partition, on its device's canonical name.
  for (int v = 0; v < f.graph.num_nodes(); ++v) {
    const std::string& name = f.graph.node(v).name();
    int found = 0;
    for (const auto& p : built) {
      if (auto id = p.graph.FindNode(name)) {
        ++found;
        EXPECT_EQ(p.device, f.device_of[v]) << name;
        EXPECT_EQ(p.graph.node(*id).requested_device(), Cpu(p.device)) << name;
      }
    }
    EXPECT_EQ(found, 1) << name;
  }
  for (const auto& p : built) EXPECT_TRUE(p.graph.validated());
  // The partitions list the original nodes by id, without copying them.
  EXPECT_EQ(
      parts->partitions[1].nodes,
      (std::vector<int>{*f.graph.FindNode("b"), *f.graph.FindNode("c"), *f.graph.FindNode("e")}));
}

TEST(PartitionTest, PairsCarryTheirKeyShapeAndType) {
  Fixture f;
  DeviceSet devices;  // each device's process incarnation goes into its Sends' keys
  for (int i = 0; i < 3; ++i) {
    DeviceSpec spec = DeviceSet::LocalCpus(3).value().device(i);
    spec.incarnation = 7 + i;
    ASSERT_TRUE(devices.Add(spec).ok());
  }
  auto parts = PartitionGraph(f.graph, devices, f.device_of);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<Built> built = BuildAll(f.graph, devices, *parts);
  const Built &p0 = built[0], &p1 = built[1];
  const Node& send = NodeIn(p0, "a/_send_0_to_cpu1");
  const Node& recv = NodeIn(p1, "a/_recv_0_on_cpu1");
  for (const Node* n : {&send, &recv}) {
    EXPECT_EQ(n->GetAttr<std::string>("tensor_name").value(), "a:0") << n->name();
    EXPECT_EQ(n->GetAttr<std::string>("send_device").value(), Cpu(0)) << n->name();
    EXPECT_EQ(n->GetAttr<std::string>("recv_device").value(), Cpu(1)) << n->name();
    EXPECT_EQ(n->GetAttr<int64_t>("send_device_incarnation").value(), 7) << n->name();
    EXPECT_EQ(n->GetAttr<DType>("T").value(), DType::kF32) << n->name();
  }
  EXPECT_EQ(send.requested_device(), Cpu(0));
  EXPECT_EQ(recv.requested_device(), Cpu(1));
  EXPECT_EQ(recv.GetAttr<Shape>("shape").value(), (Shape{4, 8}));
  EXPECT_EQ(recv.output_dtype(0), DType::kF32);
  EXPECT_EQ(recv.output_shape(0), (Shape{4, 8}));
  EXPECT_EQ(send.FindAttr("shape"), nullptr);
  // The other destination gets its own key.
  EXPECT_EQ(NodeIn(built[2], "a/_recv_0_on_cpu2").GetAttr<std::string>("recv_device").value(),
            Cpu(2));
}

TEST(PartitionTest, ControlEdgesCrossAsEmptyTensors) {
  Fixture f;
  DeviceSet devices = DeviceSet::LocalCpus(3).value();
  auto parts = PartitionGraph(f.graph, devices, f.device_of);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<Built> built = BuildAll(f.graph, devices, *parts);
  const Built &p0 = built[0], &p1 = built[1];
  // On x's device: an empty Const made once x ran, sent.
  const Node& empty = NodeIn(p0, "x/_ctl_cpu1");
  EXPECT_EQ(empty.op(), "Const");
  ASSERT_EQ(empty.control_inputs().size(), 1u);
  EXPECT_EQ(p0.graph.node(empty.control_inputs()[0]).name(), "x");
  EXPECT_EQ(empty.output_dtype(0), DType::kBool);
  EXPECT_EQ(empty.output_shape(0), (Shape{0}));
  const Node& send = NodeIn(p0, "x/_send_ctl_to_cpu1");
  EXPECT_EQ(InputNames(p0, send), (std::vector<std::string>{"x/_ctl_cpu1:0"}));
  // On e's device: e waits on the Recv instead of x.
  const Node& recv = NodeIn(p1, "x/_recv_ctl_on_cpu1");
  EXPECT_EQ(recv.GetAttr<std::string>("tensor_name").value(), "x:control");
  EXPECT_EQ(recv.GetAttr<DType>("T").value(), DType::kBool);
  EXPECT_EQ(recv.GetAttr<Shape>("shape").value(), (Shape{0}));
  const Node& e = NodeIn(p1, "e");
  ASSERT_EQ(e.control_inputs().size(), 1u);
  EXPECT_EQ(p1.graph.node(e.control_inputs()[0]).name(), "x/_recv_ctl_on_cpu1");
  // A control edge within a device stays one.
  f.device_of[*f.graph.FindNode("e")] = 0;
  f.device_of[*f.graph.FindNode("b")] = 0;
  f.device_of[*f.graph.FindNode("c")] = 0;
  auto local = PartitionGraph(f.graph, devices, f.device_of);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  std::vector<Built> built_local = BuildAll(f.graph, devices, *local);
  const Built& only0 = built_local[0];
  EXPECT_TRUE(NodesOfOp(only0, "Const").empty());
  const Node& e0 = NodeIn(only0, "e");
  ASSERT_EQ(e0.control_inputs().size(), 1u);
  EXPECT_EQ(only0.graph.node(e0.control_inputs()[0]).name(), "x");
  // Devices without nodes get no partition: cpu:1 is empty now.
  ASSERT_EQ(local->partitions.size(), 2u);
  EXPECT_EQ(local->partitions[1].device, 2);
  EXPECT_EQ(local->send_recv_pairs, 1);  // a:0 to d on cpu:2
}

TEST(PartitionTest, ErrorsNameTheNodeAndTheSizes) {
  Fixture f;
  DeviceSet devices = DeviceSet::LocalCpus(3).value();
  int n = f.graph.num_nodes();
  auto short_placement = PartitionGraph(f.graph, devices, {0, 1});
  EXPECT_EQ(short_placement.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(short_placement.status().message(),
            fmt::format("placement covers 2 nodes, the graph has {}", n));
  for (int bad : {3, -1}) {
    std::vector<int> device_of = f.device_of;
    device_of[*f.graph.FindNode("d")] = bad;
    auto r = PartitionGraph(f.graph, devices, device_of);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              fmt::format("node 'd' is placed on device {}, outside the set of 3", bad));
  }
  // A node mask that leaves out an input of an included node.
  std::vector<bool> include(n, true);
  include[*f.graph.FindNode("a")] = false;
  auto masked = PartitionGraph(f.graph, devices, f.device_of, &include);
  EXPECT_EQ(masked.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(masked.status(), {"node 'b' reads node 'a'", "leaves out"}));
  auto out_of_range = BuildPartitionGraph(f.graph, devices, PartitionedGraph{}, 0);
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  Graph unvalidated;
  auto r = PartitionGraph(unvalidated, devices, {});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(r.status(), {"validated"}));
}

}  // namespace
}  // namespace dflow
