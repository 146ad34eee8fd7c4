// The device seam: a session runs on any device type registered with the DeviceFactory. A
// stand-in type "XPU" whose memory is host memory (the null-device idea: the real CPU kernels
// registered under another type) shows what a new device type needs and nothing more: a Device
// class and a DeviceType table (framework/device_type.h), whose optional hooks the runtime asks.
#include "framework/device_factory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/register.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

class StandInXpu final : public Device {
 public:
  explicit StandInXpu(const DeviceName& name)
      : Device(name), allocator_(MakeAllocator<CpuAllocator>(name.ToString())) {
    allocator_->set_limit(size_t{64} << 20);
  }
  Allocator* allocator() override { return allocator_.get(); }
  MemoryStats memory() const override {
    return {allocator_->limit(), allocator_->bytes_in_use(), allocator_->peak_bytes()};
  }
  void ResetPeak() override { allocator_->ResetPeak(); }
  Result<Tensor> CopyFromHost(const Tensor& host) override { return host; }
  Result<Tensor> CopyToHost(const Tensor& t) override { return t; }
  DeviceContext* context() override { return &context_; }
  int runs_entered = 0;
  int EnterRun() override { return ++runs_entered; }

 private:
  AllocatorPtr<CpuAllocator> allocator_;
  DeviceContext context_;
};

// Registers the stand-in "XPU" type and a few of its kernels (the CPU ones) for one test.
class StandInXpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ops::RegisterStandardOps();
    DeviceType xpu;
    xpu.name = "XPU";
    xpu.create = [this](const DeviceName& name,
                        const DeviceOptions&) -> Result<std::unique_ptr<Device>> {
      auto d = std::make_unique<StandInXpu>(name);
      made_ = d.get();
      return std::unique_ptr<Device>(std::move(d));
    };
    xpu.register_kernels = [] {
      static const Status registered = [] {
        for (const char* op : {"Neg", "Tanh", "_Send", "_Recv"}) {
          const KernelFactory* cpu = KernelRegistry::Global().Find(op, "CPU");
          if (cpu == nullptr) return NotFound("no CPU kernel for {}", op);
          RETURN_IF_ERROR(KernelRegistry::Global().Register(op, "XPU", *cpu));
        }
        return Status::OK();
      }();
      return registered;
    };
    // Its figures and links, asked by sessions that calibrate their devices.
    xpu.calibrate = [this](Device& d, DeviceSpec spec) -> Result<DeviceSpec> {
      calibrated_.push_back(d.canonical_name());
      spec.peak_flops = 7e12;
      return spec;
    };
    xpu.link = [](Device& from, Device& to) -> std::optional<LinkSpec> {
      if (from.type() == "CPU" && to.type() == "XPU") return LinkSpec{3e-6, 9e9};
      return std::nullopt;
    };
    ASSERT_TRUE(DeviceFactory::Global().Register(std::move(xpu)).ok());
  }
  void TearDown() override { EXPECT_TRUE(DeviceFactory::Global().Unregister("XPU").ok()); }
  StandInXpu* made_ = nullptr;
  std::vector<std::string> calibrated_;
};

TEST_F(StandInXpuTest, ASessionRunsOnAnyRegisteredDeviceType) {
  auto types = DeviceFactory::Global().types();
  EXPECT_NE(std::find(types.begin(), types.end(), "CPU"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "XPU"), types.end());
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{3});
  auto y = ops::Neg(root.WithOpName("y").WithDevice("xpu:0"), x);
  auto z = ops::Tanh(root.WithOpName("z").WithDevice("xpu:0"), y);
  auto w = ops::Mul(root.WithOpName("w").WithDevice("cpu:0"), z, x);
  SessionOptions options;
  options.devices = {"cpu:0", "xpu:0"};
  options.calibrate_devices = false;
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_NE(made_, nullptr);
  EXPECT_EQ((*session)->device_set().device(1).memory_bytes, double{64 << 20});
  std::vector<float> in = {0.5f, -1, 2};
  auto out = (*session)->Run({{"x", Tensor::FromVector<float>(in, Shape{3})}}, {w.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(out->at(0).data<float>()[i], std::tanh(-in[i]) * in[i]);
  }
  EXPECT_EQ(made_->runs_entered, 1);  // its partition ran inside EnterRun/LeaveRun
  auto plan = (*session)->PlanFor({{"x", Tensor::FromVector<float>(in, Shape{3})}}, {w.name()});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->num_partitions(), 2);
}

TEST_F(StandInXpuTest, AnOpWithoutAKernelOfTheTypeNamesOpAndDevice) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{3});
  ops::Exp(root.WithOpName("e").WithDevice("xpu:0"), x);  // no XPU kernel for Exp
  SessionOptions options;
  options.devices = {"cpu:0", "xpu:0"};
  options.calibrate_devices = false;
  auto session = Session::Create(root, options);
  ASSERT_FALSE(session.ok());
  EXPECT_TRUE(MessageHas(session.status(), {"'e'", "XPU"})) << session.status().ToString();
}

// A session that calibrates asks the type's hooks; the user's figures win over them.
TEST_F(StandInXpuTest, ASessionAsksTheTypesCalibrationAndLinks) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{3});
  ops::Neg(root.WithOpName("y").WithDevice("xpu:0"), x);
  SessionOptions options;
  options.devices = {"cpu:0", "xpu:0"};
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ(calibrated_, std::vector<std::string>{"/job:localhost/task:0/device:XPU:0"});
  const DeviceSet& set = (*session)->device_set();
  EXPECT_EQ(set.device(1).peak_flops, 7e12);
  EXPECT_EQ(set.Link(0, 1).bandwidth, 9e9);  // cpu -> xpu, the hook's
  EXPECT_NE(set.Link(1, 0).bandwidth, 9e9);  // xpu -> cpu: the defaults
  calibrated_.clear();
  options.device_specs["xpu:0"] = DeviceSpec{.peak_flops = 1e9};
  auto given = LocalSession::Create(root, options);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_TRUE(calibrated_.empty());
  EXPECT_EQ((*given)->device_set().device(1).peak_flops, 1e9);
  EXPECT_NE((*given)->device_set().Link(0, 1).bandwidth, 9e9);
}

TEST(DeviceFactoryTest, UnknownTypesAndDuplicatesAreRefused) {
  auto gpu = DeviceFactory::Global().Create(*DeviceName::Parse("gpu:99"), {});
  EXPECT_EQ(gpu.status().code(), StatusCode::kNotFound);
  std::string why;
  if (DeviceFactory::Global().Count("GPU", &why) == 0) {
    EXPECT_TRUE(MessageHas(gpu.status(), {"'gpu:99'", "types: CPU", why}))
        << gpu.status().ToString();
  } else {  // the GPU type is there; its index 99 is not
    EXPECT_TRUE(MessageHas(gpu.status(), {"GPU:99"})) << gpu.status().ToString();
  }
  DeviceType lower;
  lower.name = "xpu";  // types are capitals
  lower.create = [](const DeviceName&, const DeviceOptions&) -> Result<std::unique_ptr<Device>> {
    return Unimplemented("never made");
  };
  lower.register_kernels = [] { return Status::OK(); };
  EXPECT_EQ(DeviceFactory::Global().Register(lower).code(), StatusCode::kInvalidArgument);
  DeviceType again = lower;
  again.name = "CPU";
  auto twice = DeviceFactory::Global().Register(again);
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(twice, {"'CPU'", "already registered"})) << twice.ToString();
  DeviceType incomplete;
  incomplete.name = "TPU";
  auto missing = DeviceFactory::Global().Register(incomplete);
  EXPECT_TRUE(MessageHas(missing, {"'TPU'", "create"})) << missing.ToString();
  EXPECT_EQ(DeviceFactory::Global().Unregister("TPU").code(), StatusCode::kNotFound);
  auto partial = DeviceFactory::Global().Create(*DeviceName::Parse("cpu"), {});
  EXPECT_EQ(partial.status().code(), StatusCode::kInvalidArgument);
}

// A type whose kernels fail to register makes no device, and says why.
TEST(DeviceFactoryTest, KernelsThatFailToRegisterNameTheType) {
  DeviceType broken;
  broken.name = "BRK";
  broken.create = [](const DeviceName&, const DeviceOptions&) -> Result<std::unique_ptr<Device>> {
    return Unimplemented("never made");
  };
  broken.register_kernels = [] { return Internal("the kernel table is corrupt"); };
  ASSERT_TRUE(DeviceFactory::Global().Register(broken).ok());
  auto made = DeviceFactory::Global().Create(*DeviceName::Parse("brk:0"), {});
  EXPECT_EQ(made.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(MessageHas(made.status(), {"BRK", "the kernel table is corrupt"}))
      << made.status().ToString();
  EXPECT_TRUE(DeviceFactory::Global().Unregister("BRK").ok());
}

}  // namespace
}  // namespace dflow
