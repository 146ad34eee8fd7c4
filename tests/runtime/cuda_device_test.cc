// The GPU device type: registered only where a GPU is; on one, copies both ways, the memory
// limit enforced by the allocator (naming the device), stream-ordered reuse. Without a GPU the
// GPU tests skip, saying why.
#include "runtime/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/device_factory.h"
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
  if (n == 0) EXPECT_TRUE(MessageHas(gpu.status(), {why})) << gpu.status().ToString();
}

// The GPU tests: skipped, with the reason, where no GPU is present.
class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA GPU here: " << why;
  }
};

TEST_F(CudaGpuTest, TensorsCopyToTheGpuAndBackExactly) {
  auto gpu = DeviceFactory::Global().Create(DeviceName::Parse("gpu:0").value(), {});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->type(), "GPU");
  for (int64_t n : {0, 1, 1000, 1 << 22}) {
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

}  // namespace
}  // namespace dflow
