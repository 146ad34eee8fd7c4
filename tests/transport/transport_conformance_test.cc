// The transport conformance suite: the contract of transport/transport.h, run on every transport
// this build registers (TransportRegistry::Global()), so a new transport is held to it by being
// built. Two transports of a kind are joined as tasks of one cluster: the rendezvous conformance
// suite (tests/framework/rendezvous_conformance.h) runs with every tensor crossing from one to the
// other, and the cases below check handshakes, requests, aborts and lost peers.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "framework/rendezvous_conformance.h"
#include "status_matchers.h"
#include "transport/pair_rendezvous.h"
#include "transport/transport.h"

namespace dflow::transport {
namespace {

using testing::MessageHas;
using testing::RecvResult;

constexpr char kToken[] = "test-cluster-token";

std::unique_ptr<Transport> MakeTransport(const std::string& kind, const std::string& task,
                                         bool listen, std::vector<std::string>* log = nullptr,
                                         std::string token = kToken) {
  TransportOptions o;
  o.task = task;
  o.token = std::move(token);
  if (listen) o.listen_address = TransportRegistry::Global().LocalAddress(kind).value();
  o.connect_timeout = std::chrono::seconds(5);
  if (log != nullptr) {
    auto mu = std::make_shared<std::mutex>();
    o.log = [log, mu](std::string_view line) {
      std::lock_guard lock(*mu);
      log->emplace_back(line);
    };
  } else {
    o.log = [](std::string_view) {};
  }
  auto t = TransportRegistry::Global().Create(kind, std::move(o));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Two transports of `kind`, joined: the sender is task 1, the receiver task 0 (the conformance
// suite's keys go to /job:localhost/task:0).
struct Pair {
  explicit Pair(const std::string& kind)
      : receiver(MakeTransport(kind, "/job:localhost/task:0", true)),
        sender(MakeTransport(kind, "/job:localhost/task:1", false)) {
    auto peer = sender->Connect(receiver->listen_address());
    EXPECT_TRUE(peer.ok()) << peer.status().ToString();
  }
  std::unique_ptr<Transport> receiver;
  std::unique_ptr<Transport> sender;
};

using PairFactory = testing::PairFactory<Pair>;

std::vector<testing::RendezvousUnderTest> EveryTransportPair() {
  std::vector<testing::RendezvousUnderTest> out;
  for (const std::string& kind : TransportRegistry::Global().names()) {
    out.push_back({kind, [kind] { return std::make_unique<PairFactory>(kind); }});
  }
  return out;
}

using testing::RendezvousConformance;
INSTANTIATE_TEST_SUITE_P(Transports, RendezvousConformance,
                         ::testing::ValuesIn(EveryTransportPair()),
                         [](const auto& info) { return info.param.name; });

class TransportConformance : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& kind() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Transports, TransportConformance,
                         ::testing::ValuesIn(TransportRegistry::Global().names()),
                         [](const auto& info) { return info.param; });

RendezvousKey KeyTo(const std::string& tensor, int64_t step, int dst_task = 0) {
  RendezvousKey k;
  k.src_device = "/job:localhost/task:1/device:CPU:0";
  k.src_incarnation = 7;
  k.dst_device = fmt::format("/job:localhost/task:{}/device:CPU:0", dst_task);
  k.tensor = tensor;
  k.step_id = step;
  return k;
}

RecvArgs Expect(DType dtype, const Shape& shape) {
  RecvArgs a;
  a.node = "recv";
  a.dtype = dtype;
  a.shape = shape;
  a.allocator = CpuAllocator::Default();
  return a;
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
  return s;
}

TEST_P(TransportConformance, BadOptionsAreRefusedNamingTheField) {
  struct Case {
    std::function<void(TransportOptions&)> spoil;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {[](TransportOptions& o) { o.task = "worker-1"; }, {"task 'worker-1'", "/job:NAME/task:N"}},
      {[](TransportOptions& o) { o.token.assign(kMaxTokenBytes + 1, 'x'); },
       {"cluster token", "1025 bytes", "at most 1024"}},
      {[](TransportOptions& o) { o.connect_timeout = std::chrono::milliseconds(0); },
       {"connect_timeout"}},
  };
  for (const Case& c : cases) {
    TransportOptions o;
    o.task = "/job:localhost/task:0";
    o.token = kToken;
    o.log = [](std::string_view) {};
    c.spoil(o);
    auto t = TransportRegistry::Global().Create(kind(), std::move(o));
    ASSERT_FALSE(t.ok()) << c.words[0];
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    EXPECT_TRUE(MessageHas(t.status(), c.words)) << t.status().ToString();
  }
}

TEST_P(TransportConformance, LargeTensorsArriveExactly) {
  Pair pair(kind());
  int64_t step = 1;
  for (int64_t n : {1, 1000, 16 * 1024, 4 << 20}) {
    for (bool recv_first : {true, false}) {
      ++step;
      auto s = pair.sender->Create(step).value();
      auto r = pair.receiver->Create(step).value();
      Tensor t(DType::kF32, Shape{n});
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i % 9973) * 0.5f;
      RecvResult got;
      if (recv_first)
        r->RecvAsync(KeyTo("x:0", step), Expect(DType::kF32, Shape{n}), got.Callback());
      ASSERT_TRUE(s->Send(KeyTo("x:0", step), {"send_x"}, t).ok());
      if (!recv_first) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it arrives first
        r->RecvAsync(KeyTo("x:0", step), Expect(DType::kF32, Shape{n}), got.Callback());
      }
      ASSERT_TRUE(got.Wait()) << n << " elements";
      ASSERT_TRUE(got.status().ok()) << got.status().ToString();
      ASSERT_EQ(got.tensor().shape(), Shape{n});
      EXPECT_EQ(std::memcmp(got.tensor().raw_data(), t.raw_data(), t.num_bytes()), 0) << n;
      // The receiver's tensor is its own: the sender's buffer may change after the Send.
      EXPECT_NE(got.tensor().raw_data(), t.raw_data()) << n;
    }
  }
  EXPECT_EQ(pair.receiver->stats().tensors_received, 8u);
  EXPECT_EQ(pair.sender->stats().tensors_sent, 8u);
  EXPECT_EQ(pair.receiver->stats().messages_dropped, 0u);
}

// A received tensor is the receiving device's memory, under its limit, also when it arrives
// before its Recv; one that does not fit fails the Recv naming it and the device, never landing
// in other memory instead.
TEST_P(TransportConformance, ReceivedTensorsCountAgainstTheReceivingDevicesLimit) {
  std::vector<std::unique_ptr<CpuAllocator>> devices;  // outlive the transports' tensors
  Pair pair(kind());
  int64_t step = 100;
  for (int64_t n : {int64_t{16}, int64_t{1} << 20}) {
    for (bool recv_first : {true, false}) {
      for (bool fits : {true, false}) {
        ++step;
        SCOPED_TRACE(fmt::format("{} floats, {}, {}", n, recv_first ? "Recv first" : "Send first",
                                 fits ? "fits" : "too big"));
        devices.push_back(std::make_unique<CpuAllocator>("/job:localhost/task:0/device:CPU:7"));
        CpuAllocator& device = *devices.back();
        device.set_limit(fits ? 2 * n * sizeof(float) : n * sizeof(float) / 2);
        RecvArgs args = Expect(DType::kF32, Shape{n});
        args.allocator = &device;
        auto s = pair.sender->Create(step).value();
        auto r = pair.receiver->Create(step).value();
        Tensor t(DType::kF32, Shape{n});
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i % 101);
        RecvResult got;
        if (recv_first) r->RecvAsync(KeyTo("x:0", step), args, got.Callback());
        ASSERT_TRUE(s->Send(KeyTo("x:0", step), {"send_x"}, t).ok());
        if (!recv_first) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it arrives first
          r->RecvAsync(KeyTo("x:0", step), args, got.Callback());
        }
        ASSERT_TRUE(got.Wait());
        if (fits) {
          ASSERT_TRUE(got.status().ok()) << got.status().ToString();
          EXPECT_EQ(got.tensor().allocator(), &device);
          EXPECT_EQ(device.bytes_in_use(), static_cast<size_t>(t.num_bytes()));
          EXPECT_EQ(std::memcmp(got.tensor().raw_data(), t.raw_data(), t.num_bytes()), 0);
        } else {
          EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted) << got.status().ToString();
          EXPECT_TRUE(MessageHas(got.status(), {"Recv 'recv'", "x:0", "device:CPU:7", "limit"}))
              << got.status().ToString();
        }
      }
    }
  }
}

TEST_P(TransportConformance, AWrongTokenIsRefusedNamingTheTaskAndTheAddress) {
  auto server = MakeTransport(kind(), "/job:worker/task:0", true);
  auto client = MakeTransport(kind(), "/job:worker/task:1", false, nullptr, "not-the-token");
  auto r = client->Connect(server->listen_address());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(MessageHas(r.status(), {"/job:worker/task:0", server->listen_address(), "refused",
                                      "wrong cluster token"}))
      << r.status().ToString();
  EXPECT_TRUE(server->peers().empty());
  // The server goes on serving: the right token still gets in.
  auto good = MakeTransport(kind(), "/job:worker/task:2", false);
  auto ok = good->Connect(server->listen_address());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "/job:worker/task:0");
}

TEST_P(TransportConformance, ConnectingWhereNobodyListensIsUnavailable) {
  auto listener = MakeTransport(kind(), "/job:worker/task:0", true);
  std::string address = listener->listen_address();
  listener.reset();  // the address is free again
  auto client = MakeTransport(kind(), "/job:worker/task:1", false);
  auto r = client->Connect(address);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(r.status(), {address})) << r.status().ToString();
}

TEST_P(TransportConformance, SendToATaskNotConnectedIsUnavailableNamingIt) {
  Pair pair(kind());
  auto s = pair.sender->Create(1).value();
  Status st = s->Send(KeyTo("x:0", 1, /*dst_task=*/7), {"send_x"}, Tensor(DType::kF32, Shape{2}));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(st, {"/job:localhost/task:7", "send_x"})) << st.ToString();
}

// Aborting a step in one task fails the same step's receives in the other, with the first
// error unchanged.
TEST_P(TransportConformance, AbortCrossesToThePeer) {
  Pair pair(kind());
  auto s = pair.sender->Create(5).value();
  auto r = pair.receiver->Create(5).value();
  RecvResult got;
  r->RecvAsync(KeyTo("x:0", 5), Expect(DType::kF32, Shape{1}), got.Callback());
  s->Abort(Internal("node 'boom' on task 1 failed"));
  ASSERT_TRUE(got.Wait(std::chrono::seconds(2)));
  EXPECT_EQ(got.status(), Internal("node 'boom' on task 1 failed"));
  // Later receives of the step fail the same way.
  RecvResult later;
  r->RecvAsync(KeyTo("y:0", 5), Expect(DType::kF32, Shape{1}), later.Callback());
  ASSERT_TRUE(later.Wait());
  EXPECT_EQ(later.status(), Internal("node 'boom' on task 1 failed"));
}

TEST_P(TransportConformance, ATensorForAFinishedStepIsDropped) {
  Pair pair(kind());
  pair.receiver->Create(9).value().reset();  // step 9 begins and ends on the receiver
  auto s = pair.sender->Create(9).value();
  ASSERT_TRUE(s->Send(KeyTo("x:0", 9), {"late_send"}, Tensor(DType::kF32, Shape{4})).ok());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (pair.receiver->stats().messages_dropped == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(pair.receiver->stats().messages_dropped, 1u);
  EXPECT_EQ(pair.receiver->stats().tensors_received, 0u);
}

// A peer that closes (here: its transport is destroyed) fails the steps waiting on it.
TEST_P(TransportConformance, APeerGoingAwayFailsWaitingReceivesNamingIt) {
  Pair pair(kind());
  auto r = pair.receiver->Create(3).value();
  RecvResult got;
  r->RecvAsync(KeyTo("x:0", 3), Expect(DType::kF32, Shape{1}), got.Callback());
  pair.sender.reset();
  ASSERT_TRUE(got.Wait(std::chrono::seconds(2)));
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(got.status(), {"/job:localhost/task:1"})) << got.status().ToString();
  EXPECT_TRUE(pair.receiver->peers().empty());
}

TEST_P(TransportConformance, RequestsReachTheHandlerAndRepliesComeBack) {
  Pair pair(kind());
  pair.receiver->SetCallHandler(
      [](const Transport::CallInfo& call, std::string payload, Transport::Reply reply) {
        // Answers with the method, the caller and the payload reversed.
        std::reverse(payload.begin(), payload.end());
        reply(fmt::format("{}|{}|", call.method, call.from_task) + payload);
      });
  for (size_t n : {size_t{0}, size_t{10}, size_t{100} << 10, size_t{8} << 20}) {
    std::string payload = Pattern(n, 3);
    auto r = pair.sender->Call("/job:localhost/task:0", 42, payload, std::chrono::seconds(10));
    ASSERT_TRUE(r.ok()) << n << ": " << r.status().ToString();
    std::string want = payload;
    std::reverse(want.begin(), want.end());
    EXPECT_EQ(*r, "42|/job:localhost/task:1|" + want) << n;
  }
}

// A quick method is answered while the service thread is busy with a slow call (it runs on the
// transport's thread); an ordinary method waits behind the slow call.
TEST_P(TransportConformance, QuickMethodsAreServedWhileTheServiceThreadIsBusy) {
  Pair pair(kind());
  std::atomic<bool> release{false};
  pair.receiver->SetCallHandler(
      [&](const Transport::CallInfo& call, std::string p, Transport::Reply reply) {
        if (call.method == 1) {
          while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        reply(fmt::format("{}:{}", call.method, p));
      },
      {7});
  std::promise<Result<std::string>> slow;
  pair.sender->CallAsync("/job:localhost/task:0", 1, "a", std::chrono::seconds(10),
                         [&](Result<std::string> r) { slow.set_value(std::move(r)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow call holds the thread
  auto quick = pair.sender->Call("/job:localhost/task:0", 7, "b", std::chrono::seconds(5));
  ASSERT_TRUE(quick.ok()) << quick.status().ToString();
  EXPECT_EQ(*quick, "7:b");
  auto waits = pair.sender->Call("/job:localhost/task:0", 2, "c", std::chrono::milliseconds(200));
  EXPECT_EQ(waits.status().code(), StatusCode::kDeadlineExceeded) << waits.status().ToString();
  release = true;
  auto first = slow.get_future().get();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, "1:a");
}

TEST_P(TransportConformance, AHandlersErrorReachesTheCallerUnchanged) {
  Pair pair(kind());
  pair.receiver->SetCallHandler(
      [](const Transport::CallInfo&, std::string, Transport::Reply reply) {
        reply(FailedPrecondition("partition 'p3' names unknown op 'Frob'"));
      });
  auto r = pair.sender->Call("/job:localhost/task:0", 1, "x", std::chrono::seconds(5));
  EXPECT_EQ(r.status(), FailedPrecondition("partition 'p3' names unknown op 'Frob'"));
}

TEST_P(TransportConformance, ATaskWithNoHandlerAnswersUnimplemented) {
  Pair pair(kind());
  auto r = pair.sender->Call("/job:localhost/task:0", 7, "x", std::chrono::seconds(5));
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(MessageHas(r.status(), {"/job:localhost/task:0", "method 7"}))
      << r.status().ToString();
}

TEST_P(TransportConformance, ASlowReplyIsDeadlineExceededAndLaterCallsStillWork) {
  Pair pair(kind());
  std::atomic<int> calls{0};
  pair.receiver->SetCallHandler(
      [&](const Transport::CallInfo&, std::string p, Transport::Reply reply) {
        if (calls++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
        reply(p);
      });
  auto slow = pair.sender->Call("/job:localhost/task:0", 1, "a", std::chrono::milliseconds(100));
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(slow.status(), {"/job:localhost/task:0", "100 ms"}))
      << slow.status().ToString();
  auto next = pair.sender->Call("/job:localhost/task:0", 1, "b", std::chrono::seconds(5));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, "b");
}

TEST_P(TransportConformance, AsyncCallsAreEachAnsweredOnceWithTheirOwnReplyOrDeadline) {
  Pair pair(kind());
  std::vector<Transport::Reply> held;  // method 4 is answered only at the end
  std::mutex held_mu;
  pair.receiver->SetCallHandler(
      [&](const Transport::CallInfo& call, std::string p, Transport::Reply reply) {
        if (call.method == 4) {
          std::lock_guard lock(held_mu);
          held.push_back(std::move(reply));
          return;
        }
        reply("re:" + p);
      });
  constexpr int kCalls = 64;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> got(kCalls + 1);
  std::vector<int> times(kCalls + 1, 0);
  int answered = 0;
  for (int i = 0; i <= kCalls; ++i) {
    // The last one is never answered in time.
    std::string payload = i == kCalls ? "hold" : Pattern(i * 1000, i);
    auto timeout = i == kCalls ? std::chrono::milliseconds(150) : std::chrono::milliseconds(10000);
    pair.sender->CallAsync("/job:localhost/task:0", i == kCalls ? 4 : 3, payload, timeout,
                           [&, i](Result<std::string> r) {
                             std::lock_guard lock(mu);
                             got[i] = r.ok() ? *r : r.status().ToString();
                             times[i]++;
                             answered++;
                             cv.notify_all();
                           });
  }
  auto start = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return answered == kCalls + 1; }))
        << answered << " of " << kCalls + 1 << " answered";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(got[i], "re:" + Pattern(i * 1000, i)) << i;
  EXPECT_NE(got[kCalls].find("DeadlineExceeded"), std::string::npos) << got[kCalls];
  EXPECT_NE(got[kCalls].find("150 ms"), std::string::npos) << got[kCalls];
  // A late reply to the expired call is dropped, not delivered a second time.
  {
    std::lock_guard lock(held_mu);
    for (auto& r : held) r(std::string("late"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard lock(mu);
  for (int i = 0; i <= kCalls; ++i) EXPECT_EQ(times[i], 1) << i;
}

TEST_P(TransportConformance, ACallToAPeerThatGoesAwayIsUnavailable) {
  Pair pair(kind());
  std::vector<Transport::Reply> kept;  // never answered
  std::mutex mu;
  pair.receiver->SetCallHandler(
      [&](const Transport::CallInfo&, std::string, Transport::Reply reply) {
        std::lock_guard lock(mu);
        kept.push_back(std::move(reply));
      });
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pair.receiver.reset();
  });
  auto start = std::chrono::steady_clock::now();
  auto r = pair.sender->Call("/job:localhost/task:0", 1, "x", std::chrono::seconds(20));
  closer.join();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(r.status(), {"/job:localhost/task:0"})) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(
      pair.sender->Call("/job:localhost/task:0", 1, "x", std::chrono::seconds(1)).status().code(),
      StatusCode::kUnavailable);
}

// A worker started without a name takes the one the first master gives it, and keeps it.
TEST_P(TransportConformance, AMasterNamesAnUnnamedWorker) {
  auto worker = MakeTransport(kind(), "", true);
  EXPECT_EQ(worker->task(), "");
  auto master = MakeTransport(kind(), "/job:master/task:0", false);
  auto unnamed = master->Connect(worker->listen_address());
  EXPECT_EQ(unnamed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(unnamed.status(), {"no task name"})) << unnamed.status().ToString();
  auto named = master->Connect(worker->listen_address(), "/job:worker/task:3");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(*named, "/job:worker/task:3");
  EXPECT_EQ(worker->task(), "/job:worker/task:3");
  // The next master's name for it is that master's own: the worker keeps its name and says so
  // (distributed/task_names.h maps one to the other).
  auto other = MakeTransport(kind(), "/job:master/task:1", false);
  auto renamed = other->Connect(worker->listen_address(), "/job:worker/task:4");
  ASSERT_TRUE(renamed.ok()) << renamed.status().ToString();
  EXPECT_EQ(*renamed, "/job:worker/task:3");
  EXPECT_EQ(worker->task(), "/job:worker/task:3");
  auto plain = other->Connect(worker->listen_address());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "/job:worker/task:3");
  // The named worker's tensors now route by its name.
  auto s = master->Create(1).value();
  auto r = worker->Create(1).value();
  RendezvousKey key;
  key.src_device = "/job:master/task:0/device:CPU:0";
  key.dst_device = "/job:worker/task:3/device:CPU:0";
  key.tensor = "x:0";
  key.step_id = 1;
  ASSERT_TRUE(s->Send(key, {"send_x"}, Tensor::FromVector<float>({1, 2}, Shape{2})).ok());
  RecvResult got;
  r->RecvAsync(key, Expect(DType::kF32, Shape{2}), got.Callback());
  ASSERT_TRUE(got.Wait());
  ASSERT_TRUE(got.status().ok()) << got.status().ToString();
  EXPECT_EQ(got.tensor().ToVector<float>(), (std::vector<float>{1, 2}));
}

TEST(TransportRegistryTest, AnUnknownTransportIsNotFoundNamingTheOnesBuilt) {
  auto t = TransportRegistry::Global().Create("carrier-pigeon", {});
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(t.status(), {"carrier-pigeon", "inproc"})) << t.status().ToString();
  EXPECT_EQ(TransportRegistry::Global().Register("inproc", nullptr, "").code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflow::transport
