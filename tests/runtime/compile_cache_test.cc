// A session's cache of compiled steps (runtime/compile_cache.h): one compile per signature,
// failures not kept, and a slow compile holding up only its own signature.
#include "runtime/compile_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace dflow {
namespace {

TEST(CompileCacheTest, ConcurrentRunsOfOneSignatureCompileItOnce) {
  CompileCache<int> cache;
  std::atomic<int> compiles{0};
  auto compile = [&]() -> Result<std::unique_ptr<int>> {
    compiles++;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::make_unique<int>(42);
  };
  std::vector<std::thread> threads;
  std::vector<const int*> got(8, nullptr);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { got[i] = cache.GetOrCompile("k", compile).value(); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(compiles.load(), 1);
  for (const int* p : got) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p, got[0]);
    EXPECT_EQ(*p, 42);
  }
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.Compiled(), std::vector<const int*>{got[0]});
}

TEST(CompileCacheTest, AFailedCompileIsNotKept) {
  CompileCache<int> cache;
  int attempts = 0;
  auto flaky = [&]() -> Result<std::unique_ptr<int>> {
    if (++attempts == 1) return InvalidArgument("first attempt fails");
    return std::make_unique<int>(attempts);
  };
  auto first = cache.GetOrCompile("k", flaky);
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.size(), 0);
  auto second = cache.GetOrCompile("k", flaky);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(**second, 2);
  EXPECT_EQ(cache.size(), 1);
}

TEST(CompileCacheTest, ASlowCompileHoldsUpOnlyItsOwnSignature) {
  CompileCache<int> cache;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  auto slow = std::async(std::launch::async, [&] {
    return cache.GetOrCompile("slow", [&]() -> Result<std::unique_ptr<int>> {
      started.set_value();
      released.wait();
      return std::make_unique<int>(1);
    });
  });
  started.get_future().wait();
  // Another signature compiles while "slow" is still compiling.
  auto other = std::async(std::launch::async, [&] {
    return cache.GetOrCompile(
        "other", [] { return Result<std::unique_ptr<int>>(std::make_unique<int>(2)); });
  });
  ASSERT_EQ(other.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(*other.get().value(), 2);
  release.set_value();
  EXPECT_EQ(*slow.get().value(), 1);
}

}  // namespace
}  // namespace dflow
