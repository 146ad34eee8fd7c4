#include "framework/progress.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace dflow {
namespace {

// Counts what the scopes ask of it; its polls find work every `busy_every`-th time.
class CountingEngine final : public ProgressEngine {
 public:
  explicit CountingEngine(int busy_every = 1) : busy_every_(busy_every) {}
  void BeginPolling() override { pollers++, begun++; }
  void EndPolling() override { pollers--; }
  bool Poll() override { return ++polls % busy_every_ == 0; }

  std::atomic<int> pollers{0}, begun{0}, polls{0};

 private:
  int busy_every_;
};

TEST(ProgressTest, AScopePollsTheEnginesRegisteredWhenItOpened) {
  {
    PollingScope none;
    EXPECT_TRUE(none.empty());
    EXPECT_FALSE(none.Poll());
  }
  CountingEngine a, b(/*busy_every=*/2);
  AddProgressEngine(&a);
  AddProgressEngine(&b);
  {
    PollingScope scope;
    EXPECT_FALSE(scope.empty());
    EXPECT_EQ(a.pollers.load(), 1);
    EXPECT_EQ(b.pollers.load(), 1);
    EXPECT_TRUE(scope.Poll());  // a found work; b did not
    EXPECT_TRUE(scope.Poll());  // both did
    EXPECT_EQ(a.polls.load(), 2);
    EXPECT_EQ(b.polls.load(), 2);
    {
      PollingScope nested;  // another waiting thread's, say
      EXPECT_EQ(a.pollers.load(), 2);
    }
    EXPECT_EQ(a.pollers.load(), 1);
  }
  EXPECT_EQ(a.pollers.load(), 0);
  EXPECT_EQ(b.pollers.load(), 0);
  EXPECT_EQ(a.begun.load(), 2);
  RemoveProgressEngine(&a);
  {
    PollingScope scope;
    EXPECT_FALSE(scope.Poll());  // only b, whose first poll of two finds nothing
    EXPECT_EQ(a.polls.load(), 2);
    EXPECT_EQ(b.polls.load(), 3);
  }
  RemoveProgressEngine(&b);
  RemoveProgressEngine(&b);  // not registered: nothing happens
  PollingScope after;
  EXPECT_TRUE(after.empty());
}

// An engine going away (a transport shutting down) waits for the threads polling it.
TEST(ProgressTest, RemovingAnEngineWaitsForTheScopesThatPollIt) {
  CountingEngine engine;
  AddProgressEngine(&engine);
  std::atomic<bool> opened{false}, closed{false};
  std::thread poller([&] {
    PollingScope scope;
    opened = true;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < until) scope.Poll();
    closed = true;
  });
  while (!opened) std::this_thread::yield();
  RemoveProgressEngine(&engine);
  EXPECT_TRUE(closed.load());
  EXPECT_EQ(engine.pollers.load(), 0);
  poller.join();
  const int polls = engine.polls.load();
  EXPECT_GT(polls, 0);
  PollingScope later;
  later.Poll();
  EXPECT_EQ(engine.polls.load(), polls);
}

}  // namespace
}  // namespace dflow
