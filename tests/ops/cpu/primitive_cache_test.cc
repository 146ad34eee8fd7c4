// PrimitiveCache: LRU order, the capacity bound, and that kernels share entries through it;
// PrimitiveMemo, a kernel's memo in front of it: hits, replacement of the oldest, team sizes and
// concurrent callers.
#include "ops/cpu/primitive_cache.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "test_util.h"

namespace dflow::cpu {
namespace {

std::shared_ptr<const int> Get(PrimitiveCache& cache, const std::string& key, int value,
                               int* made) {
  return cache.GetOrCreate<int>(key, [&] {
    ++*made;
    return std::make_shared<const int>(value);
  });
}

// oneDNN fixes a primitive's thread count when it is made: a device of one thread and one of
// two (each setting its OpenMP team) get entries of their own.
TEST(PrimitiveCacheTest, EachOpenMpTeamSizeHasItsOwnEntries) {
  PrimitiveCache cache(8);
  const int saved = omp_get_max_threads();
  int made = 0;
  omp_set_num_threads(1);
  EXPECT_EQ(*Get(cache, "k", 1, &made), 1);
  omp_set_num_threads(2);
  EXPECT_EQ(*Get(cache, "k", 2, &made), 2);
  EXPECT_EQ(made, 2);
  omp_set_num_threads(1);
  EXPECT_EQ(*Get(cache, "k", 99, &made), 1);  // the one-thread entry again
  EXPECT_EQ(made, 2);
  omp_set_num_threads(saved);
}

TEST(PrimitiveCacheTest, EvictsTheLeastRecentlyUsedEntry) {
  PrimitiveCache cache(2);
  int made = 0;
  EXPECT_EQ(*Get(cache, "a", 1, &made), 1);
  EXPECT_EQ(*Get(cache, "b", 2, &made), 2);
  EXPECT_EQ(*Get(cache, "a", 99, &made), 1);  // hit: a is now the most recent
  EXPECT_EQ(made, 2);
  auto c = Get(cache, "c", 3, &made);  // evicts b
  EXPECT_EQ(made, 3);
  EXPECT_EQ(*Get(cache, "a", 99, &made), 1);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(*Get(cache, "b", 4, &made), 4);  // b was evicted and is made again
  EXPECT_EQ(made, 4);
  auto s = cache.stats();
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.capacity, 2u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(*c, 3);  // an evicted entry stays valid for its holder
}

TEST(PrimitiveCacheTest, ShrinkingAndZeroCapacity) {
  PrimitiveCache cache(8);
  int made = 0;
  for (int i = 0; i < 8; ++i) Get(cache, std::to_string(i), i, &made);
  cache.SetCapacity(3);
  EXPECT_EQ(cache.stats().size, 3u);
  EXPECT_EQ(*Get(cache, "7", -1, &made), 7);  // the newest survive
  EXPECT_EQ(made, 8);
  cache.SetCapacity(0);
  EXPECT_EQ(cache.stats().size, 0u);
  EXPECT_EQ(*Get(cache, "x", 5, &made), 5);
  EXPECT_EQ(*Get(cache, "x", 6, &made), 6);  // nothing is kept
  EXPECT_EQ(made, 10);
}

// Two MatMul nodes of one shape build one primitive; a new shape builds another.
TEST(PrimitiveCacheTest, KernelsShareEntriesAcrossNodes) {
  auto& cache = PrimitiveCache::Global();
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, testing::RandomFloats(37 * 41, 1), Shape{37, 41});
  auto b = ops::Const(root, testing::RandomFloats(41 * 43, 2), Shape{41, 43});
  auto m1 = ops::MatMul(root, a, b);
  auto m2 = ops::MatMul(root, a, b);
  auto before = cache.stats();
  auto out = testing::RunScope(root, {}, {m1, m2});
  ASSERT_EQ(out.size(), 2u);
  auto after = cache.stats();
  EXPECT_EQ(after.misses - before.misses, 1u);
  EXPECT_GE(after.hits - before.hits, 1u);
  EXPECT_EQ(out[0].ToVector<float>(), out[1].ToVector<float>());
}

// A memo of two: a key it holds is a hit, without making; a third key replaces the oldest,
// which is made again when it comes back.
TEST(PrimitiveMemoTest, KeepsTheLastTwoKeys) {
  PrimitiveMemo<int, int> memo;
  int made = 0;
  auto get = [&](int key) {
    return *memo.Get(key, [&] {
      ++made;
      return std::make_shared<const int>(key * 10);
    });
  };
  EXPECT_EQ(get(1), 10);
  EXPECT_EQ(get(2), 20);
  EXPECT_EQ(get(1), 10);
  EXPECT_EQ(get(2), 20);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(get(3), 30);  // replaces 1, the oldest made
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(2), 20);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(1), 10);  // made again
  EXPECT_EQ(made, 4);
}

// As the cache, the memo keeps a primitive made for one OpenMP team size from another's runs.
TEST(PrimitiveMemoTest, EachOpenMpTeamSizeHasItsOwnEntries) {
  PrimitiveMemo<int, int> memo;
  const int saved = omp_get_max_threads();
  int made = 0;
  auto get = [&](int value) {
    return *memo.Get(7, [&] {
      ++made;
      return std::make_shared<const int>(value);
    });
  };
  omp_set_num_threads(1);
  EXPECT_EQ(get(1), 1);
  omp_set_num_threads(2);
  EXPECT_EQ(get(2), 2);
  omp_set_num_threads(1);
  EXPECT_EQ(get(99), 1);
  EXPECT_EQ(made, 2);
  omp_set_num_threads(saved);
}

// Threads asking for three keys at once always get their own key's value.
TEST(PrimitiveMemoTest, ConcurrentCallersGetTheirKeysValue) {
  PrimitiveMemo<int, int> memo;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int key = (t + i) % 3;
        auto v = memo.Get(key, [key] { return std::make_shared<const int>(key + 100); });
        if (*v != key + 100) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace dflow::cpu
