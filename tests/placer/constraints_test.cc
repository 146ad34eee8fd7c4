// DeviceSet and placement pass 1 (hard constraints and colocation groups): every constraint
// kind, and every infeasible case with what its message must name.
#include "placer/constraints.h"

#include <gtest/gtest.h>

#include <mutex>

#include "framework/kernel.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/optimizers.h"
#include "ops/register.h"
#include "ops/state_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

// An op with a GPU kernel only (the kernel is never run here).
void RegisterGpuOnlyOp() {
  static std::once_flag once;
  std::call_once(once, [] {
    ops::RegisterStandardOps();
    Status s = OpRegistry::Global().Register({.name = "TestGpuOnly",
                                              .inputs = {{.name = "x", .type_attr = "T"}},
                                              .outputs = {{.name = "y", .type_attr = "T"}},
                                              .attrs = {{"T", AttrType::kDType, std::nullopt}},
                                              .shape_fn = [](InferenceContext& c) {
                                                c.set_output(0, c.input_shape(0));
                                                return Status::OK();
                                              }});
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = KernelRegistry::Global().Register(
        "TestGpuOnly", "GPU", [](const KernelInit&) -> Result<std::unique_ptr<OpKernel>> {
          return Internal("test kernel");
        });
    ASSERT_TRUE(s.ok()) << s.ToString();
  });
}

using testing::Validated;

int Id(const Graph& g, const std::string& name) { return *g.FindNode(name); }

DeviceSet CpusAndGpu() {
  DeviceSet set = DeviceSet::LocalCpus(2).value();
  DeviceSpec gpu;
  gpu.name = DeviceName::Full("localhost", 0, "GPU", 0);
  EXPECT_TRUE(set.Add(gpu).ok());
  return set;
}

TEST(DeviceSetTest, LocalCpusMatchingAndLinks) {
  auto set = DeviceSet::LocalCpus(3);
  ASSERT_TRUE(set.ok());
  ASSERT_EQ(set->size(), 3);
  EXPECT_EQ(set->device(2).canonical(), "/job:localhost/task:0/device:CPU:2");
  EXPECT_EQ(set->Matching(DeviceName::Parse("cpu").value()), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(set->Matching(DeviceName::Parse("cpu:1").value()), (std::vector<int>{1}));
  EXPECT_TRUE(set->Matching(DeviceName::Parse("gpu").value()).empty());
  EXPECT_EQ(set->Link(0, 0).Seconds(1e9), 0);
  EXPECT_GT(set->Link(0, 1).Seconds(1e6), 0);
  DeviceSpec remote;
  remote.name = DeviceName::Full("worker", 1, "CPU", 0);
  remote.host = "other";
  ASSERT_TRUE(set->Add(remote).ok());
  EXPECT_GT(set->Link(0, 3).Seconds(1e6), set->Link(0, 1).Seconds(1e6));  // network is slower
  set->SetLink(0, 1, {1e-3, 1e6});
  EXPECT_NEAR(set->Link(0, 1).Seconds(1e6), 1.001, 1e-12);
  EXPECT_EQ(set->ShortList(), "cpu:0, cpu:1, cpu:2, worker:1/cpu:0");
}

TEST(DeviceSetTest, BadDevicesAreRefusedByName) {
  DeviceSet set;
  DeviceSpec partial;
  partial.name = DeviceName::Parse("cpu:0").value();
  EXPECT_TRUE(MessageHas(set.Add(partial), {"not fully specified"}));
  DeviceSpec d;
  d.name = DeviceName::Full("localhost", 0, "CPU", 0);
  ASSERT_TRUE(set.Add(d).ok());
  EXPECT_TRUE(MessageHas(set.Add(d), {"/job:localhost/task:0/device:CPU:0", "already"}));
  d.name = DeviceName::Full("localhost", 0, "CPU", 1);
  d.memory_bytes = 0;
  EXPECT_TRUE(MessageHas(set.Add(d), {"CPU:1", "positive"}));
  EXPECT_EQ(DeviceSet::LocalCpus(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ConstraintsTest, RequestsFullAndPartialNarrowTheCandidates) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:1"), DType::kF32, Shape{2});
  ops::Identity(root.WithOpName("anywhere"), x);
  ops::Identity(root.WithOpName("some_cpu").WithDevice("cpu"), x);
  ops::Identity(root.WithOpName("full").WithDevice("/job:localhost/task:0/device:CPU:0"), x);
  Graph g = Validated(root);
  auto c = ApplyHardConstraints(g, CpusAndGpu());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto cands = [&](const char* name) { return c->groups[c->group_of[Id(g, name)]].candidates; };
  EXPECT_EQ(cands("x"), (std::vector<int>{1}));
  // Anywhere with an Identity kernel: both CPUs, and the GPU where GPU kernels are built.
  const bool gpu_kernel = KernelRegistry::Global().Find("Identity", "GPU") != nullptr;
  EXPECT_EQ(cands("anywhere"), gpu_kernel ? (std::vector<int>{0, 1, 2}) : (std::vector<int>{0, 1}));
  EXPECT_EQ(cands("some_cpu"), (std::vector<int>{0, 1}));
  EXPECT_EQ(cands("full"), (std::vector<int>{0}));
  EXPECT_TRUE(c->log.empty());
}

TEST(ConstraintsTest, ColocationGroupsAndVariablesWithTheirUpdates) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 3});
  auto w = ops::InitializedVariable(root.WithOpName("w").WithDevice("cpu:1"), Shape{3, 2},
                                    ops::Initializer::Zeros());
  auto y = ops::MatMul(root.WithOpName("y"), x, w.var);
  auto z = ops::Identity(root.WithOpName("z").WithColocation(y), y);
  ops::SGD sgd({.learning_rate = 0.1});
  sgd.Minimize(root, ops::ReduceSum(root, z), {w.var});
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  Graph g = Validated(root);
  auto c = ApplyHardConstraints(g, CpusAndGpu());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->group_of[Id(g, "y")], c->group_of[Id(g, "z")]);
  // The initialiser Assign and the SGD update write w: same group, so also on cpu:1.
  int wg = c->group_of[Id(g, "w")];
  EXPECT_EQ(c->group_of[Id(g, w.init.node_name())], wg);
  int updates = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op() == "ApplySGD") {
      EXPECT_EQ(c->group_of[id], wg);
      ++updates;
    }
  }
  EXPECT_EQ(updates, 1);
  EXPECT_EQ(c->groups[wg].candidates, (std::vector<int>{1}));
  EXPECT_NE(c->group_of[Id(g, "x")], wg);
}

TEST(ConstraintsTest, KernelAvailabilityAndItsError) {
  RegisterGpuOnlyOp();
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  root.AddNode("TestGpuOnly", {x}, {});
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  Graph g = Validated(root);
  auto with_gpu = ApplyHardConstraints(g, CpusAndGpu());
  ASSERT_TRUE(with_gpu.ok()) << with_gpu.status().ToString();
  EXPECT_EQ(with_gpu->groups[with_gpu->group_of[Id(g, "TestGpuOnly")]].candidates,
            (std::vector<int>{2}));
  auto cpus_only = ApplyHardConstraints(g, DeviceSet::LocalCpus(2).value());
  EXPECT_EQ(cpus_only.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(cpus_only.status(),
                         {"'TestGpuOnly'", "kernels for GPU", "devices: cpu:0, cpu:1"}));
}

TEST(ConstraintsTest, ConflictingRequestsInOneGroupAndSoftPlacement) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a").WithDevice("cpu:0"), DType::kF32, Shape{2});
  ops::Identity(root.WithOpName("b").WithDevice("cpu:1").WithColocation(a), a);
  auto gpu = ops::Identity(root.WithOpName("on_gpu").WithDevice("gpu:0"), a);
  Graph g = Validated(root);
  DeviceSet cpus = DeviceSet::LocalCpus(2).value();
  auto hard = ApplyHardConstraints(g, cpus);
  EXPECT_EQ(hard.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      MessageHas(hard.status(), {"'a' (Placeholder", "requests '/device:CPU:0'", "'b' (Identity",
                                 "requests '/device:CPU:1'", "kernels for CPU"}));

  auto soft = ApplyHardConstraints(g, cpus, {.soft_placement = true});
  ASSERT_TRUE(soft.ok()) << soft.status().ToString();
  ASSERT_EQ(soft->log.size(), 2u);  // the {a, b} group and on_gpu
  EXPECT_TRUE(soft->log[0].find("'b'") != std::string::npos) << soft->log[0];
  EXPECT_EQ(soft->groups[soft->group_of[Id(g, "on_gpu")]].candidates, (std::vector<int>{0, 1}));
  (void)gpu;
}

TEST(ConstraintsTest, AlreadyPlacedNodesStayAndBadNamesAreErrors) {
  Scope root = Scope::NewRootScope();
  auto w = ops::Variable(root.WithOpName("w"), Shape{2});
  ops::Identity(root.WithOpName("read"), w);
  Graph g = Validated(root);
  DeviceSet cpus = DeviceSet::LocalCpus(2).value();
  auto c = ApplyHardConstraints(g, cpus, {.already_placed = {{"w", "cpu:1"}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->groups[c->group_of[Id(g, "w")]].candidates, (std::vector<int>{1}));
  // Soft placement never moves an already placed node.
  Scope r2 = Scope::NewRootScope();
  ops::Variable(r2.WithOpName("w").WithDevice("cpu:0"), Shape{2});
  Graph g2 = Validated(r2);
  auto moved =
      ApplyHardConstraints(g2, cpus, {.soft_placement = true, .already_placed = {{"w", "cpu:1"}}});
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->groups[moved->group_of[0]].candidates, (std::vector<int>{1}));
  EXPECT_EQ(moved->log.size(), 1u);
  auto bad = ApplyHardConstraints(g, cpus, {.already_placed = {{"w", "tpu:0"}}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"'w'", "tpu:0"}));
}

}  // namespace
}  // namespace dflow
