// The device conformance suite: the contract of framework/device.h and framework/device_type.h,
// checked on every device type of DeviceTypesUnderTest() against the CPU: copies in and out are
// exact for every dtype and size, the memory limit holds and names the device, tensors cross to
// and from the CPU and between two devices of the type, and a session trains on it with its
// variables there, as on the CPU. (The op conformance suite, tests/ops/conformance/, holds its
// kernels to the CPU's.)
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>

#include "framework/device_factory.h"
#include "framework/device_types_under_test.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/register.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"
#include "status_matchers.h"

namespace dflow::testing {
namespace {

class DeviceConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ops::RegisterStandardOps(); }
  const std::string& type() const { return GetParam(); }
  // "sim:1" for type SIM.
  std::string Name(int index) const {
    std::string lower = type();
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower + ":" + std::to_string(index);
  }
  Result<std::unique_ptr<Device>> Make(int index, size_t limit = 0) const {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(Name(index)));
    return DeviceFactory::Global().Create(name, {.threads = {1, 1}, .memory_limit = limit});
  }
};

INSTANTIATE_TEST_SUITE_P(Types, DeviceConformance, ::testing::ValuesIn(DeviceTypesUnderTest()),
                         [](const auto& info) { return info.param; });

Tensor Filled(DType dtype, int64_t n) {
  Tensor t(dtype, Shape{n});
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.num_bytes(); ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.num_bytes(); ++i) p[i] &= 1;
  }
  return t;
}

TEST_P(DeviceConformance, CopiesInAndOutAreExactForEveryDtypeAndSize) {
  auto device = Make(0);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Device& d = **device;
  EXPECT_EQ(d.type(), type());
  for (DType dtype :
       {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
      Tensor host = Filled(dtype, n);
      auto in = d.CopyFromHost(host);
      ASSERT_TRUE(in.ok()) << DTypeName(dtype) << " x" << n << ": " << in.status().ToString();
      EXPECT_EQ(in->dtype(), dtype);
      EXPECT_EQ(in->shape(), host.shape());
      if (!d.allocator()->host_accessible() && n > 0) {
        EXPECT_FALSE(in->host_accessible()) << "a device of its own memory";
        EXPECT_EQ(in->device(), d.canonical_name());
      }
      auto out = d.CopyToHost(*in);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      ASSERT_TRUE(out->host_accessible());
      ASSERT_EQ(out->num_bytes(), host.num_bytes());
      EXPECT_EQ(std::memcmp(out->raw_data(), host.raw_data(), host.num_bytes()), 0)
          << DTypeName(dtype) << " x" << n;
    }
  }
  EXPECT_TRUE(d.Synchronize().ok());
}

TEST_P(DeviceConformance, TheMemoryLimitHoldsAndNamesTheDevice) {
  constexpr size_t kLimit = 1 << 20;
  auto device = Make(0, kLimit);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Device& d = **device;
  EXPECT_EQ(d.memory().limit, kLimit);
  auto fits = Tensor::Allocate(d.allocator(), DType::kU8, Shape{kLimit / 2});
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_GE(d.memory().in_use, kLimit / 2);
  auto over = Tensor::Allocate(d.allocator(), DType::kU8, Shape{kLimit});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.status().ToString();
  EXPECT_TRUE(MessageHas(over.status(), {d.canonical_name()})) << over.status().ToString();
  // What was freed may be had again.
  fits = Tensor();
  EXPECT_TRUE(d.Synchronize().ok());
  EXPECT_TRUE(Tensor::Allocate(d.allocator(), DType::kU8, Shape{kLimit * 3 / 4}).ok());
}

// cpu:0 -> type:0 -> type:1 (when the type has two devices) -> cpu:0, each hop a Send/Recv (the
// CPU's own devices under test are cpu:1 and cpu:2).
TEST_P(DeviceConformance, TensorsCrossToAndFromTheCpuAndBetweenItsDevices) {
  const int first = type() == "CPU" ? 1 : 0;
  const bool two = DeviceFactory::Global().Count(type()) >= first + 2;
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{5});
  auto a = ops::Mul(root.WithOpName("a").WithDevice(Name(first)), x, x);
  auto b = ops::Sub(root.WithOpName("b").WithDevice(Name(two ? first + 1 : first)), a, x);
  auto c =
      ops::Add(root.WithOpName("c").WithDevice("cpu:0"), b, ops::Neg(root.WithDevice("cpu:0"), a));
  SessionOptions o;
  o.devices = {"cpu:0", Name(first)};
  if (two) o.devices.push_back(Name(first + 1));
  o.calibrate_devices = false;
  auto session = Session::Create(root, o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<float> in = {1.5f, -2, 0, 3.25f, -0.5f};
  auto out =
      (*session)->Run({{"x", Tensor::FromVector<float>(in, Shape{5})}}, {c.name(), b.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_FLOAT_EQ(out->at(0).data<float>()[i], -in[i]) << i;  // (x*x - x) - x*x
    EXPECT_FLOAT_EQ(out->at(1).data<float>()[i], in[i] * in[i] - in[i]) << i;
  }
}

// A two-layer classifier with SGD, its variables on the device, trains as on the CPU; its
// variables come back through the host.
TEST_P(DeviceConformance, ASessionTrainsOnItAsOnTheCpu) {
  auto build = [](Scope root, std::vector<Output>* vars) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
    auto y = ops::Placeholder(root.WithOpName("y"), DType::kI32, Shape{-1});
    auto w1 = ops::InitializedVariable(root.WithOpName("w1"), Shape{8, 16},
                                       ops::Initializer::GlorotUniform(1));
    auto b1 = ops::InitializedVariable(root.WithOpName("b1"), Shape{16}, ops::Initializer::Zeros());
    auto w2 = ops::InitializedVariable(root.WithOpName("w2"), Shape{16, 4},
                                       ops::Initializer::GlorotUniform(2));
    auto h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w1.var), b1.var));
    auto loss = ops::ReduceMean(
        root.WithOpName("loss"),
        ops::SparseSoftmaxCrossEntropyWithLogits(root, ops::MatMul(root, h, w2.var), y).loss);
    *vars = {w1.var, b1.var, w2.var};
    ops::SGD sgd({.learning_rate = 0.5});
    auto step = sgd.Minimize(root.WithOpName("train"), loss, *vars);
    return std::make_tuple(
        loss, step,
        std::vector<std::string>{w1.init.node_name(), b1.init.node_name(), w2.init.node_name()});
  };
  Tensor x(DType::kF32, Shape{6, 8}), y(DType::kI32, Shape{6});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = ((i * 7) % 11) * 0.1f - 0.5f;
  for (int64_t i = 0; i < 6; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 4);

  std::vector<std::vector<float>> losses(2);
  std::vector<std::vector<Tensor>> weights(2);
  for (int run = 0; run < 2; ++run) {
    const std::string device = run == 0 ? "cpu:0" : Name(0);
    Scope root = Scope::NewRootScope().WithDevice(device);
    std::vector<Output> vars;
    auto [loss, step, init] = build(root, &vars);
    SessionOptions o;
    o.device = device;
    o.calibrate_devices = false;
    auto session = Session::Create(root, o);
    ASSERT_TRUE(session.ok()) << device << ": " << session.status().ToString();
    ASSERT_TRUE((*session)->Run({}, {}, init).ok());
    for (int s = 0; s < 3; ++s) {
      auto out = (*session)->Run({{"x", x}, {"y", y}}, {loss.name()}, {step.name()});
      ASSERT_TRUE(out.ok()) << device << ": " << out.status().ToString();
      losses[run].push_back(out->at(0).data<float>()[0]);
    }
    auto snapshot = (*session)->SnapshotVariables();
    ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
    for (const auto& v : vars) weights[run].push_back(snapshot->at(v.node_name()));
  }
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 1e-5) << "step " << s;
  EXPECT_LT(losses[1][2], losses[1][0]);  // it learns
  for (size_t v = 0; v < weights[0].size(); ++v) {
    auto cpu = weights[0][v].ToVector<float>(), dev = weights[1][v].ToVector<float>();
    ASSERT_EQ(cpu.size(), dev.size());
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(dev[i], cpu[i], 1e-5) << v << "," << i;
  }
}

}  // namespace
}  // namespace dflow::testing
