// The GPU device type: registered only where a GPU is; on one, copies both ways, the memory
// limit enforced by the allocator (naming the device), stream-ordered reuse. Without a GPU the
// GPU tests skip, saying why. The GPU's calibration for the placer, and the links a session on
// CPU and GPU gets from it.
#include "ops/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "framework/device_factory.h"
#include "gpu_required.h"
#include "ops/array_ops.h"
#include "ops/cuda/cuda_calibration.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "runtime/session.h"
#include "runtime/session_devices.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

TEST(CudaDeviceTest, WithoutAGpuTheTypeIsAbsentAndTheReasonSaid) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a GPU is present: see the tests below";
  EXPECT_FALSE(why.empty());
  const auto types = DeviceFactory::Global().types();
  EXPECT_EQ(std::count(types.begin(), types.end(), "GPU"), 0);
  auto gpu = DeviceFactory::Global().Create(DeviceName::Parse("gpu:0").value(), {});
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(gpu.status(), {"GPU"})) << gpu.status().ToString();
}

TEST(CudaDeviceTest, AnIndexPastTheGpusIsNotFoundNamingTheDevice) {
  std::string why;
  const int n = CudaDeviceCount(&why);
  auto name = DeviceName::Parse(fmt::format("/job:localhost/task:0/device:GPU:{}", n + 3));
  auto gpu = CudaDevice::Create(name.value());
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(gpu.status(), {fmt::format("GPU:{}", n + 3)})) << gpu.status().ToString();
  if (n == 0) {
    EXPECT_TRUE(MessageHas(gpu.status(), {why})) << gpu.status().ToString();
  }
}

// The GPU tests: skipped, with the reason, where no GPU is present.
class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  }
};

TEST_F(CudaGpuTest, TensorsCopyToTheGpuAndBackExactly) {
  auto gpu = DeviceFactory::Global().Create(DeviceName::Parse("gpu:0").value(), {});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->type(), "GPU");
  // Through the pinned staging buffers: within one, exactly four, and past a boundary.
  for (int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 22, (int64_t{3} << 20) + 7}) {
    Tensor host(DType::kF32, Shape{n});
    for (int64_t i = 0; i < n; ++i) host.data<float>()[i] = static_cast<float>(i % 1009) - 3.5f;
    auto on_gpu = (*gpu)->CopyFromHost(host);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
    EXPECT_EQ(on_gpu->device(), (*gpu)->canonical_name());
    EXPECT_FALSE((*gpu)->allocator()->host_accessible());
    auto back = (*gpu)->CopyToHost(*on_gpu);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->shape(), host.shape());
    EXPECT_EQ(back->ToVector<float>(), host.ToVector<float>()) << n;
  }
  EXPECT_TRUE((*gpu)->Synchronize().ok());
}

TEST_F(CudaGpuTest, TheMemoryLimitIsTheAllocatorsNamingTheDevice) {
  DeviceOptions options;
  options.memory_limit = 64 << 20;
  auto gpu = DeviceFactory::Global().Create(DeviceName::Parse("gpu:0").value(), options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->memory().limit, size_t{64} << 20);
  auto a = Tensor::Allocate((*gpu)->allocator(), DType::kF32, Shape{10 << 20});  // 40 MiB
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GE((*gpu)->memory().in_use, size_t{40} << 20);
  auto b = Tensor::Allocate((*gpu)->allocator(), DType::kF32, Shape{10 << 20});  // past 64 MiB
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(MessageHas(b.status(), {"GPU:0"})) << b.status().ToString();
  const size_t peak = (*gpu)->memory().peak;
  *a = Tensor();  // freed in stream order: the same room serves the next allocation
  EXPECT_EQ((*gpu)->memory().in_use, 0u);
  auto c = Tensor::Allocate((*gpu)->allocator(), DType::kF32, Shape{10 << 20});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*gpu)->memory().peak, peak);
}

TEST_F(CudaGpuTest, ATensorOutlivesItsDevice) {
  Tensor kept;
  {
    auto gpu = DeviceFactory::Global().Create(DeviceName::Parse("gpu:0").value(), {});
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    auto on_gpu = (*gpu)->CopyFromHost(Tensor::FromVector<float>({1, 2, 3}, Shape{3}));
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
    kept = *on_gpu;
  }
  // The device is gone; its allocator (and the stream its frees are queued on) lives on with
  // the tensor, and the free at the end of this test is ordered there.
  EXPECT_EQ(kept.num_elements(), 3);
}

// A tensor one GPU device sends another of this process: the receiver copies it (peer to peer
// between two GPUs, on the device between two devices of one GPU), the sender's memory held
// until the copy has run, though the sender let go of it at once.
TEST_F(CudaGpuTest, ATensorSentToAnotherGpuDeviceArrivesWithoutTheHostWaiting) {
  const int last = CudaDeviceCount() - 1;
  auto a = CudaDevice::Create(DeviceName::Parse("/job:localhost/task:0/device:GPU:0").value());
  auto b = CudaDevice::Create(
      DeviceName::Parse(fmt::format("/job:localhost/task:0/device:GPU:{}", last)).value());
  ASSERT_TRUE(a.ok() && b.ok());
  Tensor host(DType::kF32, Shape{(int64_t{5} << 20) + 3});  // past a staging chunk, too
  for (int64_t i = 0; i < host.num_elements(); ++i) host.data<float>()[i] = 0.25f * (i % 4093);
  Tensor view;
  {
    auto on_a = (*a)->CopyFromHost(host);
    ASSERT_TRUE(on_a.ok()) << on_a.status().ToString();
    auto sent = (*a)->SendView(*on_a);
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    EXPECT_FALSE(sent->host_accessible());
    EXPECT_EQ(sent->device(), (*a)->canonical_name());
    view = *sent;
  }  // the sender's own reference is gone: the view holds its memory
  auto on_b = (*b)->CopyFromDevice(view);
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  view = Tensor();
  EXPECT_LE((*b)->held_tensors(), 1u);
  EXPECT_EQ(on_b->allocator(), (*b)->allocator());
  auto back = (*b)->CopyToHost(*on_b);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->BitwiseEquals(host));
  ASSERT_TRUE((*b)->Synchronize().ok());
  EXPECT_EQ((*b)->held_tensors(), 0u);
  // Host memory comes in as CopyFromHost; another device's memory not sent is refused, naming it.
  auto from_host = (*b)->CopyFromDevice(Tensor::FromVector<float>({1, 2}, Shape{2}));
  ASSERT_TRUE(from_host.ok()) << from_host.status().ToString();
  auto raw = (*a)->CopyFromHost(Tensor::FromVector<float>({1, 2}, Shape{2}));
  ASSERT_TRUE(raw.ok());
  auto refused = (*b)->CopyFromDevice(*raw);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(MessageHas(refused.status(), {(*a)->canonical_name()}))
      << refused.status().ToString();
}

// A graph across the CPU and every GPU (two, where there are): the values are the CPU's.
TEST_F(CudaGpuTest, APartitionedRunAcrossCpuAndGpusMatchesTheCpu) {
  const int gpus = std::min(CudaDeviceCount(), 2);
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{64, 64});
  auto w =
      ops::Const(root.WithOpName("w"), testing::RandomFloats(64 * 64, 7, -1, 1), Shape{64, 64});
  auto h = ops::MatMul(root.WithOpName("h").WithDevice("gpu:0"), x, w);
  auto t = ops::Tanh(root.WithOpName("t").WithDevice(fmt::format("gpu:{}", gpus - 1)), h);
  auto u = ops::Add(root.WithOpName("u").WithDevice("gpu:0"), t, h);
  ops::Neg(root.WithOpName("y").WithDevice("cpu:0"), u);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  SessionOptions options;
  options.devices = {"cpu:0"};
  for (int i = 0; i < gpus; ++i) options.devices.push_back(fmt::format("gpu:{}", i));
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session::Feeds feeds = {
      {"x", Tensor::FromVector(testing::RandomFloats(64 * 64, 8, -1, 1), Shape{64, 64})}};
  // The reference: plain loops.
  std::vector<float> xs = feeds[0].second.ToVector<float>(),
                     ws = testing::RandomFloats(64 * 64, 7, -1, 1);
  for (int rep = 0; rep < 3; ++rep) {
    auto got = (*session)->Run(feeds, {"y"});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const float* out = got->at(0).data<float>();
    for (int i = 0; i < 64; ++i) {
      for (int j = 0; j < 64; ++j) {
        double hv = 0;
        for (int k = 0; k < 64; ++k) hv += double{xs[i * 64 + k]} * ws[k * 64 + j];
        ASSERT_NEAR(out[i * 64 + j], -(std::tanh(hv) + hv), 1e-4) << i << "," << j;
      }
    }
  }
}

// Profiling on a GPU times a node by its kernels, not by the microseconds of queueing them: a
// 4096^3 product (137 GFLOP) takes over 1 ms at any f32 rate up to 137 TFLOP/s (an H100's or
// H200's is about 67), while its Compute returns as soon as cuBLASLt has queued it.
TEST_F(CudaGpuTest, ProfilingTimesAGpuNodeByItsKernelsNotByItsQueueing) {
  constexpr int64_t n = 4096;
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root.WithOpName("a"), testing::RandomFloats(n * n, 1, -1, 1), Shape{n, n});
  auto b = ops::Const(root.WithOpName("b"), testing::RandomFloats(n * n, 2, -1, 1), Shape{n, n});
  auto mm = ops::MatMul(root.WithOpName("mm").WithDevice("gpu:0"), a, b);
  ops::Neg(root.WithOpName("y").WithDevice("gpu:0"), mm);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  SessionOptions options;
  options.devices = {"cpu:0", "gpu:0"};
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int rep = 0; rep < 3; ++rep) {
    auto got = (*session)->Run({}, {"y"}, {}, {.profile = true});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
  }
  MeasuredCosts costs = (*session)->MeasuredNodeCosts();
  ASSERT_TRUE(costs.seconds.count("GPU"));
  ASSERT_TRUE(costs.seconds["GPU"].count("mm"));
  ASSERT_TRUE(costs.seconds["GPU"].count("y"));
  const double mm_s = costs.seconds["GPU"]["mm"], neg_s = costs.seconds["GPU"]["y"];
  EXPECT_GT(mm_s, 1e-3);
  EXPECT_LT(mm_s, 1.0);
  // Neg reads and writes 128 MiB: far less than the product, yet more than nothing.
  EXPECT_GT(neg_s, 1e-6);
  EXPECT_LT(neg_s, mm_s);
}

TEST(CudaCalibrationTest, AGpuThatIsNotThereIsNotFoundNamingIt) {
  const int n = CudaDeviceCount();
  auto c = CalibrateCuda(n + 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(c.status(), {fmt::format("gpu:{}", n + 1)})) << c.status().ToString();
}

TEST_F(CudaGpuTest, CalibrationMeasuresTheGpuAndItsLinks) {
  auto c = CachedCudaCalibration(0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->sm_count, 0);
  EXPECT_GT(c->memory_bytes, 1e9);
  // Any GPU this runs on does more than a TFLOP/s of f32 and moves more than 50 GB/s; the
  // measured bandwidth stays under the theoretical one, and PCIe or NVLink under both.
  EXPECT_GT(c->peak_flops, 1e12);
  EXPECT_GT(c->memory_bandwidth, 50e9);
  EXPECT_LT(c->memory_bandwidth, 1.2 * c->theoretical_bandwidth);
  EXPECT_GT(c->host_to_device.bandwidth, 1e9);
  EXPECT_LT(c->host_to_device.bandwidth, c->memory_bandwidth);
  EXPECT_GT(c->device_to_host.bandwidth, 1e9);
  DeviceSpec spec = c->Apply(DeviceSpec{});
  EXPECT_EQ(spec.peak_flops, c->peak_flops);
  EXPECT_EQ(spec.memory_bandwidth, c->memory_bandwidth);
  std::printf(
      "gpu:0 %s: %d SMs, %.1f TFLOP/s (f32 est.), memory %.0f GB/s measured of %.0f, "
      "H2D %.1f GB/s, D2H %.1f GB/s, %.0f ms\n",
      c->name.c_str(), c->sm_count, c->peak_flops / 1e12, c->memory_bandwidth / 1e9,
      c->theoretical_bandwidth / 1e9, c->host_to_device.bandwidth / 1e9,
      c->device_to_host.bandwidth / 1e9, c->seconds_taken * 1e3);
}

TEST_F(CudaGpuTest, ASessionOnCpuAndGpuLinksThemWithTheMeasuredFigures) {
  SessionOptions options;
  options.devices = {"cpu:0", "gpu:0"};
  auto devices = CreateSessionDevices(options);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  auto c = CachedCudaCalibration(0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(devices->set.Link(0, 1).bandwidth, c->host_to_device.bandwidth);
  EXPECT_EQ(devices->set.Link(1, 0).bandwidth, c->device_to_host.bandwidth);
  EXPECT_EQ(devices->set.device(1).peak_flops, c->peak_flops);
}

}  // namespace
}  // namespace dflow
