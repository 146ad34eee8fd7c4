// CallServer (transport/call_server.h): where a handler runs, that its reply goes back exactly
// once, and what a request gets with no handler.
#include "transport/call_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "status_matchers.h"

namespace dflow::transport {
namespace {

using testing::MessageHas;

TEST(CallServerTest, ARequestWithNoHandlerIsUnimplementedNamingTaskAndMethod) {
  CallServer server("test svc", [] { return std::string("/job:w/task:3"); });
  std::promise<Result<std::string>> got;
  server.Serve({"/job:m/task:0", 42}, "x", [&](Result<std::string> r) { got.set_value(r); });
  auto r = got.get_future().get();
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(MessageHas(r.status(), {"task /job:w/task:3", "method 42"})) << r.status().ToString();
}

TEST(CallServerTest, QuickMethodsRunHereOthersOnTheServiceThread) {
  CallServer server("test svc", [] { return std::string("t"); });
  std::atomic<std::thread::id> ran_on;
  server.SetHandler(
      [&](const Transport::CallInfo& call, std::string payload, Transport::Reply reply) {
        ran_on = std::this_thread::get_id();
        reply(call.from_task + ":" + payload);
      },
      {5});
  std::promise<Result<std::string>> quick;
  server.Serve({"a", 5}, "q", [&](Result<std::string> r) { quick.set_value(r); });
  EXPECT_EQ(ran_on.load(), std::this_thread::get_id());
  EXPECT_EQ(quick.get_future().get().value(), "a:q");
  std::promise<Result<std::string>> slow;
  server.Serve({"b", 6}, "s", [&](Result<std::string> r) { slow.set_value(r); });
  EXPECT_EQ(slow.get_future().get().value(), "b:s");
  EXPECT_NE(ran_on.load(), std::this_thread::get_id());
}

TEST(CallServerTest, AReplyGoesBackExactlyOnce) {
  CallServer server("test svc", [] { return std::string("t"); });
  server.SetHandler(
      [](const Transport::CallInfo&, std::string, Transport::Reply reply) {
        reply(std::string("first"));
        reply(Internal("second"));
      },
      {1});
  int replies = 0;
  std::string got;
  server.Serve({"a", 1}, "", [&](Result<std::string> r) {
    ++replies;
    got = r.ok() ? *r : r.status().ToString();
  });
  EXPECT_EQ(replies, 1);
  EXPECT_EQ(got, "first");
}

TEST(CallServerTest, SetHandlerWaitsForTheRunningHandler) {
  CallServer server("test svc", [] { return std::string("t"); });
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> finished{false};
  server.SetHandler(
      [&](const Transport::CallInfo&, std::string, Transport::Reply reply) {
        entered.set_value();
        released.wait();
        finished = true;
        reply(std::string());
      },
      {});
  server.Serve({"a", 1}, "", [](Result<std::string>) {});
  entered.get_future().wait();
  std::thread setter([&] {
    server.SetHandler(nullptr, {});
    EXPECT_TRUE(finished.load());  // not before the old handler returned
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(finished.load());
  release.set_value();
  setter.join();
}

TEST(CallServerTest, RequestsAfterStopAreDropped) {
  CallServer server("test svc", [] { return std::string("t"); });
  server.SetHandler([](const Transport::CallInfo&, std::string,
                       Transport::Reply reply) { reply(std::string("ran")); },
                    {});
  server.Stop();
  bool replied = false;
  server.Serve({"a", 1}, "", [&](Result<std::string>) { replied = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(replied);
  server.Stop();  // idempotent
}

}  // namespace
}  // namespace dflow::transport
