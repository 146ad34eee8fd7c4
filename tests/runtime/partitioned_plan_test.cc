// PartitionedPlan: the compile stage's output run directly, without a session.
#include "runtime/partitioned_plan.h"

#include <gtest/gtest.h>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_rendezvous.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::Devices;
using testing::MessageHas;

struct TwoDevices {
  DeviceSet set;
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devices;
  TwoDevices() {
    for (int i = 0; i < 2; ++i) {
      auto d = DeviceFactory::Global().Create(*DeviceName::Parse("cpu:" + std::to_string(i)),
                                              {.threads = {1, 1}});
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      DeviceSpec spec;
      spec.name = (*d)->name();
      spec.incarnation = (*d)->incarnation();
      EXPECT_TRUE(set.Add(spec).ok());
      devices.push_back(d->get());
      owned.push_back(std::move(d).value());
    }
  }
};

// y = tanh(x) * 2 on cpu:0, z = y + x on cpu:1: two tensors cross.
TEST(PartitionedPlanTest, RunsAcrossDevicesAgainstAPlainLoop) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{3});
  auto y = ops::Mul(root.WithOpName("y"), ops::Tanh(root.WithOpName("t"), x),
                    ops::Const(root.WithOpName("two"), 2.0f));
  ops::Add(root.WithOpName("z"), y, x);
  Graph g = root.graph();
  ASSERT_TRUE(g.Validate().ok());
  std::vector<int> device_of(g.num_nodes(), 0);
  device_of[*g.FindNode("z")] = 1;
  TwoDevices d;
  PlanSpec spec;
  spec.feeds = {*g.FindNode("x")};
  spec.fetches = {{*g.FindNode("z"), 0}, {*g.FindNode("y"), 0}};
  auto plan = PartitionedPlan::Compile(g, device_of, d.set, d.devices, spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)->num_partitions(), 2);
  EXPECT_EQ((*plan)->send_recv_pairs(), 2);  // y and x to cpu:1

  std::vector<float> in = {0.5f, -1, 2};
  std::vector<Tensor> out;
  // Without a rendezvous factory the step cannot run.
  Status no_factory = (*plan)->Run({Tensor::FromVector<float>(in, Shape{3})}, &out, {});
  EXPECT_EQ(no_factory.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(no_factory, {"rendezvous factory", "2 Send/Recv pairs"}));

  LocalRendezvousFactory factory;
  for (int64_t step = 1; step <= 3; ++step) {
    PartitionedPlan::RunOptions options;
    options.step_id = step;
    options.rendezvous = &factory;
    ASSERT_TRUE((*plan)->Run({Tensor::FromVector<float>(in, Shape{3})}, &out, options).ok());
    for (int i = 0; i < 3; ++i) {
      float want_y = std::tanh(in[i]) * 2;
      EXPECT_FLOAT_EQ(out[1].data<float>()[i], want_y);
      EXPECT_FLOAT_EQ(out[0].data<float>()[i], want_y + in[i]);
    }
  }
}

// One device is one partition: the graph itself, without Send/Recv.
TEST(PartitionedPlanTest, OneDeviceIsOnePartition) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto y = ops::Neg(root.WithOpName("y"), x);
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok());
  Session::Feeds feeds = {{"x", Tensor::FromVector<float>({1, 2}, Shape{2})}};
  auto plan = (*session)->PlanFor(feeds, {y.name()});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)->num_partitions(), 1);
  EXPECT_EQ((*plan)->send_recv_pairs(), 0);
  auto out = (*session)->Run(feeds, {y.name()});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->at(0).ToVector<float>(), (std::vector<float>{-1, -2}));
}

// Steps reuse each device's threads: a run of many steps starts one thread per other device.
TEST(PartitionedPlanTest, StepsReuseTheDevicesThreads) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{2});
  auto y = ops::Neg(root.WithOpName("y").WithDevice("cpu:1"), x);
  auto z = ops::Tanh(root.WithOpName("z").WithDevice("cpu:0"), y);
  auto session = LocalSession::Create(root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session::Feeds feeds = {{"x", Tensor::FromVector<float>({1, 2}, Shape{2})}};
  for (int step = 0; step < 50; ++step) {
    auto out = (*session)->Run(feeds, {z.name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_FLOAT_EQ(out->at(0).data<float>()[1], std::tanh(-2.0f));
  }
  EXPECT_EQ((*session)->device(0).step_threads()->num_threads(), 0);  // the caller's thread
  EXPECT_EQ((*session)->device(1).step_threads()->num_threads(), 1);
}

}  // namespace
}  // namespace dflow
