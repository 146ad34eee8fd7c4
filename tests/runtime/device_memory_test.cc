// A device whose memory is its own (as a GPU's is), on this machine without one: the stand-in
// type "SIM" keeps its tensors in separate buffers that claim not to be host memory and moves
// values only through its copies. Sessions must then copy feeds in and fetches out, constants
// in once, and Send/Recv across the host boundary, with the values of a plain CPU run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/common/common_kernels.h"
#include "ops/math_ops.h"
#include "ops/random_ops.h"
#include "ops/register.h"
#include "ops/sim/sim_backend.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

// Registers the stand-in "SIM" (tests/ops/sim/) for one test.
class DeviceMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ops::RegisterStandardOps();
    ASSERT_TRUE(DeviceFactory::Global()
                    .Register(sim::SimDeviceType([this](sim::SimDevice* d) {
                      made_ = d;
                      all_made_.push_back(d);
                    }))
                    .ok());
  }
  void TearDown() override { EXPECT_TRUE(DeviceFactory::Global().Unregister("SIM").ok()); }

  static SessionOptions Options(std::vector<std::string> devices) {
    SessionOptions o;
    o.devices = std::move(devices);
    o.calibrate_devices = false;
    return o;
  }
  sim::SimDevice* made_ = nullptr;
  std::vector<sim::SimDevice*> all_made_;
};

TEST_F(DeviceMemoryTest, FeedsGoInFetchesComeOutConstantsGoInOnce) {
  Scope root = Scope::NewRootScope().WithDevice("sim:0");
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3});
  std::vector<float> w = {1, -2, 0.5f, 3, -1, 2};
  auto c = ops::Const(root.WithOpName("w"), w, Shape{3, 2});
  auto y = ops::Relu(root.WithOpName("y"), ops::MatMul(root.WithOpName("mm"), x, c));
  auto session = LocalSession::Create(root, Options({"sim:0"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_NE(made_, nullptr);
  for (int run = 0; run < 3; ++run) {
    std::vector<float> in = {1, 2, 3, -1, 0.5f, run * 1.0f};
    auto out = (*session)->Run({{"x", Tensor::FromVector<float>(in, Shape{2, 3})}}, {y.name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const Tensor& t = out->at(0);
    EXPECT_TRUE(t.host_accessible());  // the fetch came out of the device
    ASSERT_EQ(t.shape(), (Shape{2, 2}));
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        float ref = 0;
        for (int k = 0; k < 3; ++k) ref += in[i * 3 + k] * w[k * 2 + j];
        EXPECT_FLOAT_EQ(t.data<float>()[i * 2 + j], std::max(ref, 0.0f)) << run;
      }
    }
    // The constant went in when the plan was compiled; each run copies its feed in and its
    // fetch out (also from the second run on, when outputs come from the planned arena).
    EXPECT_EQ(made_->copies_in.load(), 1 + (run + 1));
    EXPECT_EQ(made_->copies_out.load(), run + 1);
  }
}

TEST_F(DeviceMemoryTest, SendAndRecvCrossTheHostBoundaryBothWays) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{4});
  auto a = ops::Neg(root.WithOpName("a").WithDevice("cpu:0"), x);
  auto c = ops::Const(root.WithOpName("c").WithDevice("sim:0"), 3.0f);
  auto b = ops::Mul(root.WithOpName("b").WithDevice("sim:0"), a, c);
  auto d = ops::Add(root.WithOpName("d").WithDevice("cpu:0"), b, x);
  auto e = ops::Relu(root.WithOpName("e").WithDevice("sim:0"), d);
  auto session = LocalSession::Create(root, Options({"cpu:0", "sim:0"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<float> in = {1, -2, 0.25f, 4};
  auto out =
      (*session)->Run({{"x", Tensor::FromVector<float>(in, Shape{4})}}, {e.name(), b.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int i = 0; i < 4; ++i) {
    const float bi = -in[i] * 3;
    EXPECT_FLOAT_EQ(out->at(1).data<float>()[i], bi);
    EXPECT_FLOAT_EQ(out->at(0).data<float>()[i], std::max(bi + in[i], 0.0f));
  }
  // In: the constant, a (Recv), d (Recv). Out: b (Send), then the two fetches.
  EXPECT_EQ(made_->copies_in.load(), 3);
  EXPECT_EQ(made_->copies_out.load(), 3);
  auto plan = (*session)->PlanFor({{"x", Tensor::FromVector<float>(in, Shape{4})}}, {e.name()});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->num_partitions(), 2);
}

// Between two devices of this process whose memory is their own (as two GPUs), a Send hands
// its device's view and the Recv copies it in; nothing passes through the host.
TEST_F(DeviceMemoryTest, SendAndRecvBetweenTwoDevicesCopyDeviceToDevice) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{4});
  auto a = ops::Neg(root.WithOpName("a").WithDevice("sim:0"), x);
  auto b = ops::Relu(root.WithOpName("b").WithDevice("sim:1"), a);
  auto c = ops::Mul(root.WithOpName("c").WithDevice("sim:0"), b, a);
  auto session = LocalSession::Create(root, Options({"cpu:0", "sim:0", "sim:1"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_EQ(all_made_.size(), 2u);
  std::vector<float> in = {1, -2, 0.25f, -4};
  auto out = (*session)->Run({{"x", Tensor::FromVector<float>(in, Shape{4})}}, {c.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out->at(0).data<float>()[i], std::max(-in[i], 0.0f) * -in[i]) << i;
  }
  // a goes sim:0 -> sim:1 and b back, device to device; only the fetch leaves for the host.
  int between = 0, out_copies = 0;
  for (sim::SimDevice* d : all_made_) {
    between += d->copies_between.load();
    out_copies += d->copies_out.load();
  }
  EXPECT_EQ(between, 2);
  EXPECT_EQ(out_copies, 1);
}

TEST_F(DeviceMemoryTest, VariablesLiveOnTheDeviceAndCheckpointThroughTheHost) {
  Scope root = Scope::NewRootScope().WithDevice("sim:0");
  auto v = ops::Variable(root.WithOpName("v"), Shape{3});
  auto init = ops::Assign(root.WithOpName("init"), v,
                          ops::Const(root.WithOpName("v0"), std::vector<float>{1, 2, 3}, Shape{3}));
  auto step = ops::Assign(root.WithOpName("step"), v,
                          ops::Add(root.WithOpName("next"), v, ops::Const(root, 0.5f)));
  auto session = LocalSession::Create(root, Options({"sim:0"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto initialised = (*session)->Run({}, {}, {init.node_name()});
  ASSERT_TRUE(initialised.ok()) << initialised.status().ToString();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*session)->Run({}, {}, {step.node_name()}).ok());
  auto value = (*session)->Run({}, {v.name()});
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(value->at(0).data<float>()[i], i + 1 + 2.0f);

  const std::string path = ::testing::TempDir() + "/device_memory_ckpt.dflow";
  ASSERT_TRUE((*session)->SaveCheckpoint(path).ok());
  ASSERT_TRUE((*session)->Run({}, {}, {step.node_name()}).ok());
  ASSERT_TRUE((*session)->RestoreCheckpoint(path).ok());
  value = (*session)->Run({}, {v.name()});
  ASSERT_TRUE(value.ok());
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(value->at(0).data<float>()[i], i + 3.0f);
  // A restored value went back into the device's memory: the step still updates it there.
  ASSERT_TRUE((*session)->Run({}, {}, {step.node_name()}).ok());
  value = (*session)->Run({}, {v.name()});
  ASSERT_TRUE(value.ok());
  EXPECT_FLOAT_EQ(value->at(0).data<float>()[0], 3.5f);
  std::remove(path.c_str());
}

TEST_F(DeviceMemoryTest, AnAssignOfAValueOthersStillReadCopiesOnTheDevice) {
  Scope root = Scope::NewRootScope().WithDevice("sim:0");
  auto v = ops::Variable(root.WithOpName("v"), Shape{2});
  auto value =
      ops::Add(root.WithOpName("value"), ops::Const(root, std::vector<float>{1, 2}, Shape{2}),
               ops::Const(root, 1.0f));
  auto init = ops::Assign(root.WithOpName("init"), v, value);
  auto session = LocalSession::Create(root, Options({"sim:0"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // "value" is fetched too, so Assign may not take its buffer.
  auto out = (*session)->Run({}, {init.name(), value.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(made_->copies_on_device.load(), 1);
  EXPECT_FLOAT_EQ(out->at(0).data<float>()[1], 3.0f);
  EXPECT_FLOAT_EQ(out->at(1).data<float>()[1], 3.0f);
}

TEST_F(DeviceMemoryTest, RandomInitializersAreTheCpusValuesCopiedIn) {
  int copies_in = -1;  // the sim device's, read while its session lives
  auto values = [&](const std::string& device) -> std::vector<Tensor> {
    Scope root = Scope::NewRootScope().WithDevice(device);
    auto u = ops::RandomUniform(root.WithOpName("u"), Shape{5, 7}, -1, 2, 42);
    auto n = ops::RandomNormal(root.WithOpName("n"), Shape{33}, 0.5, 3, 7, DType::kF64);
    auto session = LocalSession::Create(root, Options({device}));
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    if (!session.ok()) return {};
    auto out = (*session)->Run({}, {u.name(), n.name()});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (device == "sim:0") copies_in = made_->copies_in.load();
    return out.ok() ? *out : std::vector<Tensor>{};
  };
  auto cpu = values("cpu:0");
  auto sim = values("sim:0");
  ASSERT_EQ(cpu.size(), 2u);
  ASSERT_EQ(sim.size(), 2u);
  EXPECT_EQ(copies_in, 2);  // generated in host memory, copied in
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(sim[i].shape(), cpu[i].shape());
    ASSERT_EQ(sim[i].dtype(), cpu[i].dtype());
    EXPECT_EQ(std::memcmp(sim[i].raw_data(), cpu[i].raw_data(), cpu[i].num_bytes()), 0) << i;
  }
}

// Only ops without inputs are computed in host memory: a node with inputs is refused by name
// (on "SIMH", a SIM whose Exp is host-computed).
TEST_F(DeviceMemoryTest, AHostComputedOpWithInputsIsRefusedByName) {
  DeviceType hosted = sim::SimDeviceType();
  hosted.name = "SIMH";
  hosted.register_kernels = [] {
    RETURN_IF_ERROR(common::RegisterDeviceMemoryKernels("SIMH"));
    return common::RegisterHostComputed("Exp", "SIMH");
  };
  ASSERT_TRUE(DeviceFactory::Global().Register(std::move(hosted)).ok());
  Scope root = Scope::NewRootScope().WithDevice("simh:0");
  auto e = ops::Exp(root.WithOpName("e"), ops::Const(root, 1.0f));
  auto session = LocalSession::Create(root, Options({"simh:0"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto refused = (*session)->Run({}, {e.name()});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(refused.status(), {"'e'", "has inputs"})) << refused.status().ToString();
  EXPECT_TRUE(DeviceFactory::Global().Unregister("SIMH").ok());
}

TEST_F(DeviceMemoryTest, FailedCopiesNameTheFeedOrFetchAndTheDevice) {
  Scope root = Scope::NewRootScope().WithDevice("sim:0");
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1});
  auto y = ops::Neg(root.WithOpName("y"), x);
  SessionOptions options = Options({"sim:0"});
  options.device_memory_bytes = 4096;
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // A feed larger than the device's memory.
  auto big = (*session)->Run({{"x", Tensor(DType::kF32, Shape{8192})}}, {y.name()});
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  EXPECT_TRUE(MessageHas(big.status(), {"feed 'x'", "SIM:0"})) << big.status().ToString();
  // A fetch whose copy out fails.
  made_->refuse_copies_out = true;
  auto refused = (*session)->Run({{"x", Tensor(DType::kF32, Shape{4})}}, {y.name()});
  EXPECT_EQ(refused.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(MessageHas(refused.status(), {"fetch 0", "SIM:0", "copies out refused"}))
      << refused.status().ToString();
}

}  // namespace
}  // namespace dflow
