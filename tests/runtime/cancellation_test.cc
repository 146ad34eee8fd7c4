// Deadlines and cancellation: on one device and on several, a step ends with the right error
// and no further node starts once it is aborted.
#include "runtime/cancellation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ops/array_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::Devices;
using testing::MessageHas;

// A chain of `n` Tanh nodes over a [1M] vector (about a millisecond each here), on `device`.
Output LongChain(const Scope& root, int n, const std::string& device = "") {
  Scope s = device.empty() ? root : root.WithDevice(device);
  Output y = ops::Placeholder(s.WithOpName("x"), DType::kF32, Shape{1 << 20});
  for (int i = 0; i < n; ++i) y = ops::Tanh(s.WithOpName("t" + std::to_string(i)), y);
  return y;
}

Tensor Ones() {
  Tensor t(DType::kF32, Shape{1 << 20});
  for (auto& v : t.flat<float>()) v = 1;
  return t;
}

int NodesRun(const StepTrace& trace) {
  int n = 0;
  for (const auto& d : trace.devices) n += static_cast<int>(d.nodes.size());
  return n;
}

TEST(CancellationTokenTest, CallsRegisteredCallbacksOnceAndIsSticky) {
  CancellationToken token;
  int calls = 0;
  Status seen;
  int64_t id = token.Register([&](const Status& s) {
    calls++;
    seen = s;
  });
  int64_t gone = token.Register([&](const Status&) { calls += 100; });
  token.Unregister(gone);
  token.Cancel(Cancelled("user pressed stop"));
  token.Cancel(Cancelled("again"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, Cancelled("user pressed stop"));
  EXPECT_TRUE(token.cancelled());
  token.Unregister(id);
  // Registering after the cancel calls back at once.
  Status late;
  EXPECT_EQ(token.Register([&](const Status& s) { late = s; }), 0);
  EXPECT_EQ(late, Cancelled("user pressed stop"));
}

TEST(StepControlTest, FirstAbortWinsAndAbortsTheRendezvous) {
  StepControl control(7, std::nullopt, nullptr);
  EXPECT_FALSE(control.ShouldStop());
  EXPECT_TRUE(control.Abort(Internal("first")));
  EXPECT_FALSE(control.Abort(Internal("second")));
  EXPECT_TRUE(control.ShouldStop());
  EXPECT_EQ(control.status(), Internal("first"));
}

TEST(StepControlTest, ThePassedDeadlineStopsTheStep) {
  StepControl control(1, std::chrono::milliseconds(0), nullptr);
  bool stopped = false;
  for (int i = 0; i < 64 && !stopped; ++i) stopped = control.ShouldStop();
  EXPECT_TRUE(stopped);
  EXPECT_EQ(control.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(control.status(), {"0 ms"}));
}

// The timeout holds on one device too: the chain stops part way.
TEST(SessionDeadlineTest, TimeoutStopsAOneDeviceRun) {
  Scope root = Scope::NewRootScope();
  Output y = LongChain(root, 400);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  StepTrace trace;
  Session::RunOptions options;
  options.timeout = std::chrono::milliseconds(30);
  options.trace = &trace;
  auto r = (*session)->Run({{"x", Ones()}}, {y.name()}, {}, options);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_TRUE(MessageHas(r.status(), {"30 ms"}));
  EXPECT_LT(NodesRun(trace), 401);
  // The session stays usable.
  auto again = (*session)->Run({{"x", Ones()}}, {"t0"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FLOAT_EQ(again->at(0).data<float>()[5], std::tanh(1.0f));
}

TEST(SessionCancelTest, ARunIsCancelledFromAnotherThread) {
  Scope root = Scope::NewRootScope();
  Output y = LongChain(root, 2000);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  CancellationToken cancel;
  StepTrace trace;
  Session::RunOptions options;
  options.cancellation = &cancel;
  options.trace = &trace;
  Status result;
  std::thread run([&] {
    result = (*session)->Run({{"x", Ones()}}, {y.name()}, {}, options).status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cancel.Cancel();
  run.join();
  EXPECT_EQ(result.code(), StatusCode::kCancelled) << result.ToString();
  EXPECT_LT(NodesRun(trace), 2001);
  // A run given a cancelled token fails at once.
  auto late = (*session)->Run({{"x", Ones()}}, {"t0"}, {}, {.cancellation = &cancel});
  EXPECT_EQ(late.status().code(), StatusCode::kCancelled);
}

// A Recv waits for a Send that never comes; cancelling ends the step.
TEST(SessionCancelTest, CancellingEndsAStepWaitingOnARecv) {
  Scope root = Scope::NewRootScope();
  Output orphan = testing::OrphanRecv(root);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto y = ops::Neg(root.WithOpName("y").WithDevice("cpu:1"), orphan);
  auto z = ops::Const(root.WithOpName("z").WithDevice("cpu:0"), 1.0f);
  auto session = Session::Create(root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  CancellationToken cancel;
  Status result;
  std::thread run([&] {
    result = (*session)->Run({}, {y.name(), z.name()}, {}, {.cancellation = &cancel}).status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cancel.Cancel(Cancelled("stop waiting"));
  run.join();
  EXPECT_EQ(result, Cancelled("stop waiting")) << result.ToString();
}

// A failure on one device stops the other device's executor from starting nodes, though it
// never reaches a Recv.
TEST(SessionAbortTest, AFailureStopsEveryDeviceNotOnlyAtARecv) {
  Scope root = Scope::NewRootScope();
  Output busy = LongChain(root, 400, "cpu:1");
  auto bad = ops::Placeholder(root.WithOpName("bad").WithDevice("cpu:0"), DType::kF32, Shape{1});
  auto checked = ops::CheckNumerics(root.WithOpName("check").WithDevice("cpu:0"), bad, "bad input");
  auto session = Session::Create(root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Tensor nan = Tensor::FromVector<float>({std::nanf("")}, Shape{1});
  StepTrace trace;
  Session::RunOptions options;
  options.trace = &trace;
  Session::Feeds feeds = {{"x", Ones()}, {"bad", nan}};
  auto r = (*session)->Run(feeds, {busy.name(), checked.name()}, {}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(MessageHas(r.status(), {"node 'check'", "bad input"})) << r.status().ToString();
  int ran_on_1 = 0;
  for (const auto& d : trace.devices) {
    if (d.device.find("CPU:1") != std::string::npos) ran_on_1 = static_cast<int>(d.nodes.size());
  }
  EXPECT_LT(ran_on_1, 400);
}

}  // namespace
}  // namespace dflow
