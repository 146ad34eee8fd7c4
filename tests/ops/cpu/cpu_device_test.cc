#include "ops/cpu/cpu_device.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "ops/array_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

#ifdef DFLOW_TEST_LIBOMP
extern "C" int kmp_get_blocktime();
#endif

namespace dflow {
namespace {

TEST(ThreadBudgetTest, SplitNeverExceedsBudget) {
  for (int cores = 1; cores <= 16; ++cores) {
    for (int inter = 1; inter <= cores; ++inter) {
      auto s = ThreadBudget{cores, inter}.Resolve();
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(s->inter_op_threads, inter);
      EXPECT_GE(s->intra_op_threads, 1);
      EXPECT_LE(s->inter_op_threads * s->intra_op_threads, cores);
    }
  }
}

TEST(ThreadBudgetTest, DefaultsUseAllCoresForKernels) {
  auto s = ThreadBudget{}.Resolve();
  ASSERT_TRUE(s.ok());
  int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(s->num_threads, cores);
  EXPECT_EQ(s->inter_op_threads, 1);
  EXPECT_EQ(s->intra_op_threads, cores);
}

TEST(ThreadBudgetTest, BadBudgets) {
  EXPECT_EQ((ThreadBudget{-1, 0}.Resolve().status().code()), StatusCode::kInvalidArgument);
  auto r = ThreadBudget{2, 3}.Resolve();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("inter_op_threads (3)"), std::string::npos);
}

TEST(CpuDeviceTest, CreatesPoolForExtraInterOpThreads) {
  auto name = DeviceName::Full("localhost", 0, "CPU", 0);
  auto one = CpuDevice::Create(name, {.threads = {4, 1}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->inter_op_pool(), nullptr);
  EXPECT_EQ((*one)->intra_op_threads(), 4);
  auto three = CpuDevice::Create(name, {.threads = {6, 3}});
  ASSERT_TRUE(three.ok());
  ASSERT_NE((*three)->inter_op_pool(), nullptr);
  EXPECT_EQ((*three)->inter_op_pool()->num_threads(), 2);
  EXPECT_EQ((*three)->intra_op_threads(), 2);
  EXPECT_EQ((*three)->canonical_name(), "/job:localhost/task:0/device:CPU:0");
  auto gpu = CpuDevice::Create(DeviceName::Full("localhost", 0, "GPU", 0), {});
  EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflow

namespace dflow {
namespace {

// The limit the placer plans with is the one the allocator enforces: going over it is
// ResourceExhausted naming the node, the device, the bytes asked and the limit.
TEST(CpuDeviceMemoryTest, GoingOverTheLimitNamesNodeDeviceBytesAndLimit) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1});
  auto big = ops::Tanh(root.WithOpName("big"), x);
  SessionOptions options;
  options.device_memory_bytes = 1 << 20;
  auto session = LocalSession::Create(root, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ((*session)->device().memory().limit, size_t{1} << 20);
  EXPECT_EQ((*session)->device_set().device(0).memory_bytes, double{1 << 20});
  Tensor small(DType::kF32, Shape{1024});
  for (auto& v : small.flat<float>()) v = 0;
  ASSERT_TRUE((*session)->Run({{"x", small}}, {big.name()}).ok());
  Tensor large(DType::kF32, Shape{512 * 1024});  // 2 MiB
  for (auto& v : large.flat<float>()) v = 0;
  auto r = (*session)->Run({{"x", large}}, {big.name()});
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(testing::MessageHas(
      r.status(), {"node 'big'", "/device:CPU:0", "2097152 bytes", "limit 1048576 bytes"}))
      << r.status().ToString();
  EXPECT_LE((*session)->last_step_stats().peak_bytes, size_t{1} << 20);
}

TEST(CpuDeviceMemoryTest, DefaultLimitIsThePhysicalMemory) {
  auto d = CpuDevice::Create(DeviceName::Full("localhost", 0, "CPU", 0), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->memory().limit, PhysicalMemoryBytes());
  EXPECT_GT(PhysicalMemoryBytes(), size_t{1} << 28);
}

// The OpenMP runtime this build runs on (cmake/Dependencies.cmake, DFLOW_OPENMP_RUNTIME). oneDNN
// was built against GCC's libgomp and asks for its versioned entry points; with LLVM's libomp
// configured, the program's own dependency on libomp comes first in the lookup, so those entry
// points, and the OpenMP functions dflow calls, are libomp's: one runtime, one team of threads.
TEST(OpenMpRuntimeTest, OneDnnAndDflowShareTheConfiguredRuntime) {
  for (const auto& [symbol, version] :
       {std::pair{"GOMP_parallel", "GOMP_4.0"}, std::pair{"omp_get_max_threads", "OMP_1.0"},
        std::pair{"omp_in_parallel", "OMP_1.0"}}) {
    void* found = dlvsym(RTLD_DEFAULT, symbol, version);
    ASSERT_NE(found, nullptr) << symbol << "@" << version;
    Dl_info info;
    ASSERT_NE(dladdr(found, &info), 0) << symbol;
#ifdef DFLOW_TEST_LIBOMP
    EXPECT_THAT(info.dli_fname, ::testing::HasSubstr("libomp")) << symbol;
#else
    EXPECT_THAT(info.dli_fname, ::testing::HasSubstr("libgomp")) << symbol;
#endif
    // The unversioned name, as dflow's own code was linked, finds the same library.
    Dl_info plain;
    ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, symbol), &plain), 0) << symbol;
    EXPECT_STREQ(plain.dli_fname, info.dli_fname) << symbol;
  }
#ifdef DFLOW_TEST_LIBOMP
  // A run on a CPU device sets how long its thread's team spins after a region: 2 ms, not
  // libomp's 200 (unless KMP_BLOCKTIME says otherwise).
  if (std::getenv("KMP_BLOCKTIME") == nullptr) {
    std::thread([] {
      Scope root = Scope::NewRootScope();
      auto y = ops::Identity(root, ops::Const(root, Tensor::Scalar(1.0f)));
      testing::RunScope(root, {}, {y});
      EXPECT_EQ(kmp_get_blocktime(), 2);
    }).join();
  }
#endif
  // Regions of the runtime's team size run on that many threads, each once.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  std::atomic<int> seen{0}, team{0};
#pragma omp parallel
  {
    seen.fetch_or(1 << omp_get_thread_num());
    team.store(omp_get_num_threads());
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(team.load(), 2);
  EXPECT_EQ(seen.load(), 3);
}

}  // namespace
}  // namespace dflow
