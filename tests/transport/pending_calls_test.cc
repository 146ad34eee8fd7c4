// PendingCalls (transport/pending_calls.h): each call ends exactly once, by the first of its
// answer, its deadline, its connection's loss or the transport's end.
#include "transport/pending_calls.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "status_matchers.h"

namespace dflow::transport {
namespace {

using testing::MessageHas;

// What a call's `done` got, and how often.
struct Outcome {
  std::optional<Result<std::string>> result;
  int calls = 0;
  Transport::Reply Done() {
    return [this](Result<std::string> r) {
      ++calls;
      result = std::move(r);
    };
  }
};

const std::chrono::milliseconds kLong{60'000};

TEST(PendingCallsTest, AnAnswerEndsTheCallOnce) {
  PendingCalls calls;
  Outcome o;
  const int peer = 0;
  uint64_t id = calls.Add("/job:w/task:1", &peer, 7, kLong, o.Done());
  EXPECT_TRUE(calls.Awaits(id, &peer));
  EXPECT_TRUE(calls.End(id, std::string("bytes"), &peer));
  ASSERT_EQ(o.calls, 1);
  ASSERT_TRUE(o.result->ok());
  EXPECT_EQ(o.result->value(), "bytes");
  // A second answer, a late deadline or a loss find nothing.
  EXPECT_FALSE(calls.Awaits(id, &peer));
  EXPECT_FALSE(calls.End(id, std::string("again")));
  calls.FailTask("", Cancelled("gone"));
  EXPECT_EQ(o.calls, 1);
}

TEST(PendingCallsTest, OnlyTheConnectionAskedMayAnswer) {
  PendingCalls calls;
  Outcome o;
  const int asked = 0, other = 0;
  uint64_t id = calls.Add("/job:w/task:1", &asked, 1, kLong, o.Done());
  EXPECT_FALSE(calls.Awaits(id, &other));
  EXPECT_FALSE(calls.End(id, std::string("forged"), &other));
  EXPECT_EQ(o.calls, 0);
  EXPECT_TRUE(calls.End(id, std::string("real"), &asked));
  EXPECT_EQ(o.result->value(), "real");
}

TEST(PendingCallsTest, AReplyOverItsMethodsLimitEndsTheCallNamingIt) {
  PendingCalls calls;
  calls.SetReplyLimit(1, 8);
  const int peer = 0;
  Outcome small, big, other;
  uint64_t a = calls.Add("/job:w/task:1", &peer, 1, kLong, small.Done());
  uint64_t b = calls.Add("/job:w/task:1", &peer, 1, kLong, big.Done());
  uint64_t c = calls.Add("/job:w/task:1", &peer, 2, kLong, other.Done());
  EXPECT_EQ(calls.ReplyRoom(a, &peer), std::optional<uint64_t>(8));
  EXPECT_EQ(calls.ReplyRoom(c, &peer), std::optional<uint64_t>(kMaxReplyBytes));
  EXPECT_EQ(calls.ReplyRoom(a, nullptr), std::nullopt);  // not through that connection
  EXPECT_TRUE(calls.End(a, std::string(8, 'x'), &peer));
  EXPECT_TRUE(small.result->ok());
  EXPECT_TRUE(calls.End(b, std::string(9, 'x'), &peer));
  EXPECT_EQ(big.result->status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(MessageHas(big.result->status(),
                         {"task /job:w/task:1", "(method 1)", "9 bytes", "over the 8"}))
      << big.result->status().ToString();
  EXPECT_TRUE(calls.EndOversized(c, uint64_t{1} << 31, &peer));  // a transport's early check
  EXPECT_EQ(other.result->status().code(), StatusCode::kResourceExhausted);
}

TEST(PendingCallsTest, APassedDeadlineEndsTheCallNamingTaskRequestAndMethod) {
  PendingCalls calls;
  Outcome late, soon;
  uint64_t id = calls.Add("/job:w/task:2", nullptr, 9, std::chrono::milliseconds(1), soon.Done());
  calls.Add("/job:w/task:2", nullptr, 9, kLong, late.Done());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  calls.Expire();
  ASSERT_EQ(soon.calls, 1);
  EXPECT_EQ(soon.result->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(soon.result->status(),
                         {"task /job:w/task:2", fmt::format("request {}", id), "method 9", "1 ms"}))
      << soon.result->status().ToString();
  EXPECT_EQ(late.calls, 0);
}

TEST(PendingCallsTest, ALostConnectionOrTaskEndsOnlyItsCalls) {
  PendingCalls calls;
  Outcome a, b, c;
  const int peer_a = 0, peer_b = 0;
  calls.Add("/job:w/task:1", &peer_a, 1, kLong, a.Done());
  calls.Add("/job:w/task:2", &peer_b, 1, kLong, b.Done());
  calls.Add("/job:w/task:3", nullptr, 1, kLong, c.Done());
  calls.FailPeer(&peer_a, Unavailable("lost task 1"));
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.result->status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.calls + c.calls, 0);
  calls.FailTask("/job:w/task:3", Unavailable("lost task 3"));
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(b.calls, 0);
  calls.FailTask("", Cancelled("shutting down"));
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(b.result->status().code(), StatusCode::kCancelled);
}

TEST(PendingCallsTest, DoneRunsOutsideTheLockAndMayCallAgain) {
  PendingCalls calls;
  Outcome second;
  bool ran = false;
  calls.Add("/job:w/task:1", nullptr, 1, kLong, [&](Result<std::string>) {
    // A retry from inside `done` takes the table's lock again.
    calls.Add("/job:w/task:1", nullptr, 1, kLong, second.Done());
    ran = true;
  });
  calls.FailTask("", Unavailable("lost"));
  EXPECT_TRUE(ran);
  EXPECT_EQ(second.calls, 0);  // added after the failure was taken: it waits
  calls.FailTask("", Unavailable("lost again"));
  EXPECT_EQ(second.calls, 1);
}

}  // namespace
}  // namespace dflow::transport
