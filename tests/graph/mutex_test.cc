#include "graph/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace dflow {
namespace {

using namespace std::chrono_literals;

// True when `mu` is free (taking it and giving it back at once).
bool IsFree(Mutex& mu) {
  if (!mu.TryLock()) return false;
  mu.Unlock();
  return true;
}

TEST(MutexTest, MutexLockHoldsForItsScope) {
  Mutex mu;
  {
    MutexLock lock(mu);
    std::thread([&] { EXPECT_FALSE(IsFree(mu)); }).join();
  }
  EXPECT_TRUE(IsFree(mu));
}

TEST(MutexTest, MutexLockUnlocksAndRelocksInTheMiddle) {
  Mutex mu;
  {
    MutexLock lock(mu);
    lock.Unlock();
    std::thread([&] { EXPECT_TRUE(IsFree(mu)); }).join();
    lock.Lock();
    std::thread([&] { EXPECT_FALSE(IsFree(mu)); }).join();
  }
  EXPECT_TRUE(IsFree(mu));
  {
    MutexLock lock(mu);
    lock.Unlock();  // the scope ends unlocked: nothing left to release
  }
  EXPECT_TRUE(IsFree(mu));
}

TEST(MutexTest, MutexLocksTakesAllInAnyOrder) {
  Mutex a, b, c, d;
  std::thread other([&] {
    for (int i = 0; i < 1000; ++i) {
      MutexLocks lock(d, c, b, a);
    }
  });
  for (int i = 0; i < 1000; ++i) {
    MutexLocks lock(a, b, c, d);
  }
  other.join();
  {
    MutexLocks lock(a, b);
    std::thread([&] { EXPECT_FALSE(IsFree(a) || IsFree(b)); }).join();
  }
  EXPECT_TRUE(IsFree(a) && IsFree(b) && IsFree(c) && IsFree(d));
}

struct Flag {
  Mutex mu;
  CondVar cv;
  bool set DFLOW_GUARDED_BY(mu) = false;
};

TEST(CondVarTest, WaitReturnsOncePredicateHolds) {
  Flag f;
  std::thread setter([&] {
    MutexLock lock(f.mu);
    f.set = true;
    f.cv.NotifyAll();
  });
  {
    MutexLock lock(f.mu);
    f.cv.Wait(f.mu, [&]() DFLOW_REQUIRES(f.mu) { return f.set; });
    EXPECT_TRUE(f.set);
  }
  setter.join();
  EXPECT_TRUE(IsFree(f.mu));
}

TEST(CondVarTest, TimedWaitsReturnThePredicate) {
  Flag f;
  MutexLock lock(f.mu);
  auto is_set = [&]() DFLOW_REQUIRES(f.mu) { return f.set; };
  EXPECT_FALSE(f.cv.WaitFor(f.mu, 1ms, is_set));
  EXPECT_FALSE(f.cv.WaitUntil(f.mu, std::chrono::steady_clock::now() + 1ms, is_set));
  f.set = true;
  EXPECT_TRUE(f.cv.WaitFor(f.mu, 1h, is_set));
  EXPECT_TRUE(f.cv.WaitUntil(f.mu, std::chrono::steady_clock::now(), is_set));
  // Still held after the waits: another thread cannot take it.
  std::thread([&] { EXPECT_FALSE(IsFree(f.mu)); }).join();
}

}  // namespace
}  // namespace dflow
