#include "transport/ucx/ucx_transport.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "framework/peer_device_memory.h"
#include "framework/progress.h"
#include "framework/rendezvous_conformance.h"
#include "status_matchers.h"
#include "transport/pair_rendezvous.h"

extern char** environ;

namespace dflow::transport {
namespace {

using testing::MessageHas;
using testing::RecvResult;

constexpr char kToken[] = "test-cluster-token";

// The lines a transport logs, from its own threads.
class TestLog {
 public:
  std::function<void(std::string_view)> Sink() {
    return [this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
      cv_.notify_all();
    };
  }
  // The first line holding `words`, waiting up to 5 s for it; empty when none came.
  std::string WaitFor(std::string_view words) {
    std::unique_lock lock(mu_);
    std::string found;
    cv_.wait_for(lock, std::chrono::seconds(5), [&] {
      for (const std::string& l : lines_) {
        if (l.find(words) != std::string::npos) found = l;
      }
      return !found.empty();
    });
    return found;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

std::unique_ptr<UcxTransport> MakeTransport(const std::string& task, bool listen,
                                            TestLog* log = nullptr, std::string token = kToken,
                                            size_t by_reference_bytes = 64 << 10,
                                            bool polled_by_steps = true) {
  UcxTransportOptions o;
  o.task = task;
  o.polled_by_steps = polled_by_steps;
  o.by_reference_bytes = by_reference_bytes;
  o.token = std::move(token);
  if (listen) o.listen_address = "127.0.0.1:0";
  o.connect_timeout = std::chrono::seconds(5);
  o.log = log != nullptr ? log->Sink() : [](std::string_view) {};
  auto t = UcxTransport::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Two transports in this process, joined over loopback: the sender is task 1, the receiver
// task 0 (the conformance suite's keys go to /job:localhost/task:0). Both are of this host, so
// tensors of `by_reference_bytes` or more go by reference (0: all through UCX).
struct Pair {
  explicit Pair(size_t by_reference_bytes = 64 << 10, bool polled_by_steps = true)
      : receiver(MakeTransport("/job:localhost/task:0", true, nullptr, kToken, by_reference_bytes,
                               polled_by_steps)),
        sender(MakeTransport("/job:localhost/task:1", false, nullptr, kToken, by_reference_bytes,
                             polled_by_steps)) {
    auto peer = sender->Connect(receiver->listen_address());
    EXPECT_TRUE(peer.ok()) << peer.status().ToString();
  }
  std::unique_ptr<UcxTransport> receiver;
  std::unique_ptr<UcxTransport> sender;
};

using PairFactory = testing::PairFactory<Pair>;

using testing::RendezvousConformance;
using testing::RendezvousUnderTest;
// Through UCX (by_reference_bytes 0), and with every tensor by reference (1 byte and up).
INSTANTIATE_TEST_SUITE_P(
    Ucx, RendezvousConformance,
    ::testing::Values(
        RendezvousUnderTest{"UcxLoopback", [] { return std::make_unique<PairFactory>(0); }},
        RendezvousUnderTest{"UcxByReference", [] { return std::make_unique<PairFactory>(1); }}),
    [](const auto& info) { return info.param.name; });

RendezvousKey KeyTo(const std::string& tensor, int64_t step, int dst_task = 0) {
  RendezvousKey k;
  k.src_device = "/job:localhost/task:1/device:CPU:0";
  k.src_incarnation = 7;
  k.dst_device = fmt::format("/job:localhost/task:{}/device:CPU:0", dst_task);
  k.tensor = tensor;
  k.step_id = step;
  return k;
}

RecvArgs Expect(DType dtype, const Shape& shape, Allocator* allocator) {
  RecvArgs a;
  a.node = "recv";
  a.dtype = dtype;
  a.shape = shape;
  a.allocator = allocator;
  return a;
}

void LargeTensorsArriveExactly(size_t by_reference) {
  Pair pair(by_reference);
  // Reference-counted (graph/allocator.h): the receiver's progress thread may let go of its
  // reference to the last tensor after the Recv's callback has run and this function returned.
  auto device_memory = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:0");
  int64_t step = 1;
  for (int64_t n : {1, 1000, 16 * 1024, 1 << 20, 16 << 20}) {
    for (bool recv_first : {true, false}) {
      ++step;
      auto s = pair.sender->Create(step).value();
      auto r = pair.receiver->Create(step).value();
      Tensor t(DType::kF32, Shape{n});
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i % 9973) * 0.5f;
      RecvResult got;
      RendezvousKey key = KeyTo("x:0", step);
      if (recv_first)
        r->RecvAsync(key, Expect(DType::kF32, Shape{n}, device_memory.get()), got.Callback());
      ASSERT_TRUE(s->Send(key, {"send_x"}, t).ok());
      if (!recv_first) {
        // Let it arrive before the Recv asks.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        r->RecvAsync(key, Expect(DType::kF32, Shape{n}, device_memory.get()), got.Callback());
      }
      ASSERT_TRUE(got.Wait()) << n << " elements";
      ASSERT_TRUE(got.status().ok()) << got.status().ToString();
      Tensor out = got.tensor();
      ASSERT_EQ(out.shape(), Shape{n});
      ASSERT_EQ(std::memcmp(out.raw_data(), t.raw_data(), t.num_bytes()), 0) << n;
      if (n >= (1 << 20) || recv_first) {
        // Pulled straight into the Recv's memory (small eager tensors that came first wait in
        // host memory, which is the same memory on a CPU).
        EXPECT_EQ(out.device(), device_memory->device()) << n << " recv_first=" << recv_first;
      }
    }
  }
  TransportStats st = pair.receiver->stats();
  EXPECT_EQ(st.tensors_received, 10u);
  EXPECT_EQ(pair.sender->stats().tensors_sent, 10u);
  EXPECT_EQ(st.messages_dropped, 0u);
  // 16 Ki and more floats by reference, when on.
  EXPECT_EQ(st.tensors_received_by_reference, by_reference > 0 ? 6u : 0u);
  EXPECT_EQ(pair.sender->stats().tensors_sent_by_reference, by_reference > 0 ? 6u : 0u);
  EXPECT_EQ(st.readable_peers, by_reference > 0 ? 1u : 0u);
}

// Large tensors take UCX's rendezvous protocol, or go by reference, and land in the Recv's
// allocator, whether the Recv or the tensor comes first.
TEST(UcxTransportTest, LargeTensorsArriveExactlyInTheRecvsAllocator) {
  for (size_t by_reference : {size_t{0}, size_t{64 << 10}}) {
    SCOPED_TRACE(fmt::format("by_reference_bytes={}", by_reference));
    ASSERT_NO_FATAL_FAILURE(LargeTensorsArriveExactly(by_reference));
  }
}

// Two transports of this host reach each other through a second endpoint (by worker address,
// over shared memory) in both directions, unless shared memory is off; tensors arrive exactly
// either way, small and large, each way.
TEST(UcxTransportTest, PeersOfThisHostGetASecondEndpointUnlessSharedMemoryIsOff) {
  if (const char* env = std::getenv("UCX_MM_ERROR_HANDLING")) {
    GTEST_SKIP() << "UCX_MM_ERROR_HANDLING=" << env << " decides for the options here";
  }
  for (bool shared_memory : {true, false}) {
    std::unique_ptr<UcxTransport> t[2];
    for (int i = 0; i < 2; ++i) {
      UcxTransportOptions o;
      o.task = fmt::format("/job:localhost/task:{}", i);
      o.token = kToken;
      if (i == 0) o.listen_address = "127.0.0.1:0";
      o.shared_memory = shared_memory;
      o.log = [](std::string_view) {};
      t[i] = UcxTransport::Create(std::move(o)).value();
    }
    ASSERT_TRUE(t[1]->Connect(t[0]->listen_address()).ok());
    int64_t step = 0;
    // First a large tensor from the listener right after the handshake: it may leave on the
    // first endpoint, which must stay open until it is through.
    for (int64_t n : {4 << 20, 3}) {
      for (int to : {1, 0}) {
        ++step;
        auto s = t[1 - to]->Create(step).value();
        auto r = t[to]->Create(step).value();
        Tensor x(DType::kF32, Shape{n});
        for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 101 + to);
        RendezvousKey key = KeyTo("x:0", step, to);
        key.src_device = fmt::format("/job:localhost/task:{}/device:CPU:0", 1 - to);
        RecvResult got;
        r->RecvAsync(key, Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
        ASSERT_TRUE(s->Send(key, {"send_x"}, x).ok());
        ASSERT_TRUE(got.Wait());
        ASSERT_TRUE(got.status().ok()) << got.status().ToString();
        EXPECT_EQ(std::memcmp(got.tensor().raw_data(), x.raw_data(), x.num_bytes()), 0)
            << n << " elements to task " << to << ", shared_memory=" << shared_memory;
      }
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(t[i]->stats().same_host_peers, shared_memory ? 1u : 0u) << "task " << i;
      EXPECT_EQ(t[i]->stats().messages_dropped, 0u) << "task " << i;
    }
  }
}

// True once `t` holds the only reference to its buffer (the sender let go of what it held for
// a Recv), within five seconds.
bool BecomesUnique(const Tensor& t) {
  for (int i = 0; i < 500 && !t.buffer_unique(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return t.buffer_unique();
}

// A tensor sent by reference stays in the sender's memory until the receiver has copied it
// (then the sender lets it go), or until the receiving step ends without a copy; the receiver
// never reads a sender that is gone: the step fails instead.
TEST(UcxTransportTest, TensorsByReferenceAreHeldUntilCopiedOrDropped) {
  Pair pair;
  ASSERT_EQ(pair.receiver->stats().readable_peers, 1u);
  const int64_t n = 64 << 10;  // 256 KiB
  Tensor x(DType::kF32, Shape{n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 977);
  const Tensor copy = x.Clone();
  {
    // Copied when the Recv asks: held until then, let go after.
    auto s = pair.sender->Create(1).value();
    auto r = pair.receiver->Create(1).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 1), {"send_x"}, x).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(x.buffer_unique()) << "the sender holds it for the Recv";
    RecvResult got;
    r->RecvAsync(KeyTo("x:0", 1), Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
    ASSERT_TRUE(got.Wait());
    ASSERT_TRUE(got.status().ok()) << got.status().ToString();
    EXPECT_FALSE(got.tensor().SharesBufferWith(x));
    EXPECT_TRUE(got.tensor().BitwiseEquals(copy));
    EXPECT_TRUE(BecomesUnique(x)) << "still held after the copy";
  }
  {
    // The receiving step ends without a Recv: let go too.
    auto s = pair.sender->Create(2).value();
    auto r = pair.receiver->Create(2).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 2), {"send_x"}, x).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r->Abort(Cancelled("the step is given up"));
    EXPECT_TRUE(BecomesUnique(x)) << "still held after the receiver's abort";
  }
  EXPECT_EQ(pair.sender->stats().tensors_sent_by_reference, 2u);
  EXPECT_EQ(pair.receiver->stats().tensors_received_by_reference, 1u);
  {
    // The sender is gone before the Recv asks: the Recv fails, Unavailable, naming the task.
    auto s = pair.sender->Create(3).value();
    auto r = pair.receiver->Create(3).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 3), {"send_x"}, x).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.reset();
    pair.sender.reset();
    EXPECT_TRUE(x.buffer_unique());
    // Once the receiver knows (at once here: the sender closed its endpoints), the step fails.
    for (int i = 0; i < 500 && !pair.receiver->peers().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    RecvResult got;
    r->RecvAsync(KeyTo("x:0", 3), Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
    ASSERT_TRUE(got.Wait());
    EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
    EXPECT_TRUE(MessageHas(got.status(), {"/job:localhost/task:1"})) << got.status().ToString();
  }
}

// Device memory (a GPU's, stood in for here) that exports a handle to other processes of this
// host, as a GPU's tensor on its way out does (CUDA IPC): "dev:<address>:<bytes>".
class ExportingMemory final : public Allocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    return host_.Allocate(bytes, alignment);
  }
  void Deallocate(void* p, size_t bytes) override { host_.Deallocate(p, bytes); }
  const std::string& device() const override { return name_; }
  bool host_accessible() const override { return false; }
  Result<std::string> ExportToPeer(const void* p, size_t bytes) override {
    if (refuse) return Unavailable("{}: no handle today", name_);
    exported++;
    return fmt::format("dev:{}:{}", reinterpret_cast<uintptr_t>(p), bytes);
  }
  bool refuse = false;
  std::atomic<int> exported{0};

 private:
  std::string name_ = "/job:localhost/task:1/device:GPU:0";
  CpuAllocator host_{"/job:localhost/task:1/device:GPU:0"};
};

// A tensor in device memory goes to a Recv of another process of this host by the handle its
// memory exports (no bytes on the wire): the Recv gets a tensor over PeerDeviceMemory naming
// the handle, and the sender holds its tensor until that tensor is gone. Memory that exports
// no handle fails the Send, naming it and the Send; a Recv that takes host memory only refuses
// the tensor, naming itself.
TEST(UcxTransportTest, DeviceTensorsGoByTheHandleTheirMemoryExports) {
  Pair pair;
  ASSERT_EQ(pair.receiver->stats().readable_peers, 1u);
  auto memory = MakeAllocator<ExportingMemory>();
  const int64_t n = 1000;
  auto x = Tensor::Allocate(memory.get(), DType::kF32, Shape{n});
  ASSERT_TRUE(x.ok());
  RecvArgs takes = Expect(DType::kF32, Shape{n}, CpuAllocator::Default());
  takes.accepts_device_memory = true;
  {
    auto s = pair.sender->Create(1).value();
    auto r = pair.receiver->Create(1).value();
    RendezvousKey key = KeyTo("x:0", 1);
    EXPECT_TRUE(s->TakesDeviceMemory(key)) << "a process of this host";
    ASSERT_TRUE(s->Send(key, {"send_x"}, *x).ok());
    Tensor arrived;
    {
      RecvResult got;
      r->RecvAsync(key, takes, got.Callback());
      ASSERT_TRUE(got.Wait());
      ASSERT_TRUE(got.status().ok()) << got.status().ToString();
      arrived = got.tensor();
    }
    auto* peer = dynamic_cast<PeerDeviceMemory*>(arrived.allocator());
    ASSERT_NE(peer, nullptr);
    EXPECT_EQ(peer->handle(),
              fmt::format("dev:{}:{}", reinterpret_cast<uintptr_t>(x->raw_data()), n * 4));
    EXPECT_FALSE(arrived.host_accessible());
    EXPECT_EQ(arrived.shape(), Shape{n});
    EXPECT_EQ(arrived.device(), key.src_device);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(x->buffer_unique()) << "held while the receiver may read it";
    arrived = Tensor();
    EXPECT_TRUE(BecomesUnique(*x)) << "still held after the receiver let go";
  }
  EXPECT_EQ(memory->exported.load(), 1);
  EXPECT_EQ(pair.sender->stats().tensors_sent_by_reference, 1u);
  EXPECT_EQ(pair.sender->stats().bytes_sent, 0u + n * 4);
  {
    // A Recv that takes host memory only: refused, naming it; the sender lets go.
    auto s = pair.sender->Create(2).value();
    auto r = pair.receiver->Create(2).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 2), {"send_x"}, *x).ok());
    RecvResult got;
    r->RecvAsync(KeyTo("x:0", 2), Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
    ASSERT_TRUE(got.Wait());
    EXPECT_EQ(got.status().code(), StatusCode::kUnimplemented) << got.status().ToString();
    EXPECT_TRUE(MessageHas(got.status(), {"Recv 'recv'", "task:1/device:CPU:0"}))
        << got.status().ToString();
    EXPECT_TRUE(BecomesUnique(*x));
  }
  {
    // Memory that exports no handle: the Send fails with its reason, naming the Send.
    memory->refuse = true;
    auto s = pair.sender->Create(3).value();
    Status sent = s->Send(KeyTo("x:0", 3), {"send_x"}, *x);
    EXPECT_EQ(sent.code(), StatusCode::kUnavailable) << sent.ToString();
    EXPECT_TRUE(MessageHas(sent, {"Send 'send_x'", "no handle today", "task:0"}))
        << sent.ToString();
  }
}

// A tensor in a memfd of the sender (a shareable allocator's block) is not copied: the Recv's
// tensor is a read-only view of the sender's memfd, mapped here, and the sender holds the
// tensor until that view is gone. A tensor elsewhere is still copied.
TEST(UcxTransportTest, TensorsInMemfdsAreReadWhereTheyLie) {
  Pair pair;
  ASSERT_EQ(pair.receiver->stats().mappable_peers, 1u);
  ASSERT_EQ(pair.sender->stats().mappable_peers, 1u);
  auto memory = MakeAllocator<CpuAllocator>("/job:localhost/task:1/device:CPU:0");
  memory->set_shareable(true);
  const int64_t n = 64 << 10;  // 256 KiB
  Tensor x = Tensor::Allocate(memory.get(), DType::kF32, Shape{n}).value();
  ASSERT_TRUE(memory->FindShared(x.raw_data()).has_value());
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 977);
  const Tensor copy = x.Clone();
  {
    auto s = pair.sender->Create(1).value();
    auto r = pair.receiver->Create(1).value();
    // A piece from the middle, as Split hands out.
    const Tensor piece = x.Part(1000, Shape{n / 2});
    ASSERT_TRUE(s->Send(KeyTo("x:0", 1), {"send_x"}, piece).ok());
    Tensor view;
    {
      RecvResult got;
      r->RecvAsync(KeyTo("x:0", 1), Expect(DType::kF32, Shape{n / 2}, nullptr), got.Callback());
      ASSERT_TRUE(got.Wait());
      ASSERT_TRUE(got.status().ok()) << got.status().ToString();
      view = got.tensor();
    }
    EXPECT_TRUE(view.BitwiseEquals(copy.Part(1000, Shape{n / 2})));
    EXPECT_TRUE(view.buffer_read_only());
    EXPECT_FALSE(view.buffer_unique()) << "a kernel would write into the sender's memory";
    EXPECT_NE(view.raw_data(), piece.raw_data()) << "mapped anew, not the sender's address";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(x.buffer_refs(), 3) << "x, piece and the sender's hold while the view lives";
    view = Tensor();
    for (int i = 0; i < 500 && x.buffer_refs() != 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(x.buffer_refs(), 2) << "still held after the view died";
  }
  EXPECT_EQ(pair.sender->stats().tensors_sent_mapped, 1u);
  EXPECT_EQ(pair.receiver->stats().tensors_received_mapped, 1u);
  {
    // Not in a memfd: copied as before.
    auto s = pair.sender->Create(2).value();
    auto r = pair.receiver->Create(2).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 2), {"send_x"}, copy).ok());
    RecvResult got;
    r->RecvAsync(KeyTo("x:0", 2), Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
    ASSERT_TRUE(got.Wait());
    ASSERT_TRUE(got.status().ok()) << got.status().ToString();
    EXPECT_TRUE(got.tensor().BitwiseEquals(x));
    EXPECT_FALSE(got.tensor().buffer_read_only());
  }
  EXPECT_EQ(pair.receiver->stats().tensors_received_mapped, 1u);
  EXPECT_EQ(pair.receiver->stats().tensors_received_by_reference, 2u);
  {
    // The view outlives the step and the transports: it still reads the same values, and its
    // death tells no one.
    auto s = pair.sender->Create(3).value();
    auto r = pair.receiver->Create(3).value();
    ASSERT_TRUE(s->Send(KeyTo("x:0", 3), {"send_x"}, x).ok());
    Tensor view;
    {
      RecvResult got;
      r->RecvAsync(KeyTo("x:0", 3), Expect(DType::kF32, Shape{n}, nullptr), got.Callback());
      ASSERT_TRUE(got.Wait());
      ASSERT_TRUE(got.status().ok()) << got.status().ToString();
      view = got.tensor();
    }
    s.reset();
    r.reset();
    pair.sender.reset();
    pair.receiver.reset();
    EXPECT_TRUE(view.BitwiseEquals(copy));
    x = Tensor();  // the sender's last reference: a retired block is freed, the view keeps it
    EXPECT_EQ(memory->shared_blocks(), 0u) << "a block lost with its peer went back to the cache";
    EXPECT_TRUE(view.BitwiseEquals(copy));
  }
}

// Either side with by_reference_bytes 0: every tensor goes through UCX, both ways.
// A 1 MiB tensor from task 1 (`sender`) to task 0 (`receiver`) in step `step`, and one back in
// step `step` + 1; each must arrive exactly.
void OneMiBEachWay(UcxTransport* receiver, UcxTransport* sender, int64_t step) {
  for (int to : {0, 1}) {
    UcxTransport* from = to == 0 ? sender : receiver;
    UcxTransport* into = to == 0 ? receiver : sender;
    auto s = from->Create(step + to).value();
    auto r = into->Create(step + to).value();
    Tensor x(DType::kF32, Shape{1 << 18});
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = static_cast<float>(i);
    RendezvousKey key = KeyTo("x:0", step + to, to);
    key.src_device = fmt::format("/job:localhost/task:{}/device:CPU:0", 1 - to);
    RecvResult got;
    r->RecvAsync(key, Expect(DType::kF32, x.shape(), nullptr), got.Callback());
    ASSERT_TRUE(s->Send(key, {"send_x"}, x).ok());
    ASSERT_TRUE(got.Wait());
    ASSERT_TRUE(got.status().ok()) << got.status().ToString();
    EXPECT_TRUE(got.tensor().BitwiseEquals(x));
  }
}

TEST(UcxTransportTest, NoTensorsByReferenceWhenEitherSideTurnsThemOff) {
  for (int off : {0, 1}) {
    auto receiver =
        MakeTransport("/job:localhost/task:0", true, nullptr, kToken, off == 0 ? 0 : 64 << 10);
    auto sender =
        MakeTransport("/job:localhost/task:1", false, nullptr, kToken, off == 1 ? 0 : 64 << 10);
    ASSERT_TRUE(sender->Connect(receiver->listen_address()).ok());
    ASSERT_NO_FATAL_FAILURE(OneMiBEachWay(receiver.get(), sender.get(), 10));
    for (UcxTransport* t : {sender.get(), receiver.get()}) {
      EXPECT_EQ(t->stats().readable_peers, 0u) << off;
      EXPECT_EQ(t->stats().tensors_sent_by_reference, 0u) << off;
      EXPECT_EQ(t->stats().tensors_received, 1u) << off;
    }
  }
}

// TransportOptions::cross_memory = false (dflow-worker --no-cross-memory): the process neither
// reads nor maps a peer's memory, nor offers its own; large tensors still arrive, through UCX.
TEST(UcxTransportTest, CrossMemoryOffReadsNoPeersMemoryEitherWay) {
  UcxTransportOptions o;
  o.task = "/job:localhost/task:0";
  o.token = kToken;
  o.listen_address = "127.0.0.1:0";
  o.cross_memory = false;
  auto receiver = UcxTransport::Create(o);
  ASSERT_TRUE(receiver.ok()) << receiver.status().ToString();
  auto sender = MakeTransport("/job:localhost/task:1", false);
  ASSERT_TRUE(sender->Connect((*receiver)->listen_address()).ok());
  ASSERT_NO_FATAL_FAILURE(OneMiBEachWay(receiver->get(), sender.get(), 20));
  for (UcxTransport* t : {sender.get(), receiver->get()}) {
    EXPECT_EQ(t->stats().readable_peers, 0u);
    EXPECT_EQ(t->stats().mappable_peers, 0u);
    EXPECT_EQ(t->stats().tensors_sent_by_reference, 0u);
  }
}

// A transport that shuts down says goodbye: its peers fail what waits on it saying that it
// left, not that the connection was lost (which a peer of a crashed process still reports).
TEST(UcxTransportTest, ATransportThatShutsDownSaysGoodbye) {
  auto server = MakeTransport("/job:worker/task:0", true);
  auto client = MakeTransport("/job:master/task:0", false);
  ASSERT_TRUE(server && client);
  std::promise<void> asked;
  server->SetCallHandler([&](const Transport::CallInfo&, std::string, Transport::Reply) {
    asked.set_value();  // never answered
  });
  ASSERT_TRUE(client->Connect(server->listen_address()).ok());
  std::promise<Result<std::string>> answer;
  client->CallAsync("/job:worker/task:0", 1, "", std::chrono::seconds(30),
                    [&](Result<std::string> r) { answer.set_value(std::move(r)); });
  asked.get_future().wait();
  const auto before = std::chrono::steady_clock::now();
  server.reset();
  auto got = answer.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Result<std::string> r = got.get();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("task /job:worker/task:0 at"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("left (it said goodbye"), std::string::npos)
      << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  EXPECT_TRUE(client->peers().empty());
}

// A peer that finished its handshake and then left is freed a peer timeout later once nothing
// holds it: here every client leaves while one of its requests is still being served, whose
// reply comes after it has gone (the request holds the peer until then).
TEST(UcxTransportTest, PeersThatLeaveAreFreedOnceNothingHoldsThem) {
  UcxTransportOptions o;
  o.task = "/job:worker/task:0";
  o.token = kToken;
  o.listen_address = "127.0.0.1:0";
  o.peer_timeout = std::chrono::milliseconds(300);
  o.log = [](std::string_view) {};
  auto server = UcxTransport::Create(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::mutex mu;
  std::vector<std::thread> slow;
  (*server)->SetCallHandler(
      [&](const Transport::CallInfo& call, std::string, Transport::Reply reply) {
        if (call.method != 1) {
          reply(std::string("now"));
          return;
        }
        std::lock_guard lock(mu);
        slow.emplace_back([reply = std::move(reply)] {
          std::this_thread::sleep_for(std::chrono::milliseconds(600));
          reply(std::string("late"));
        });
      });
  for (int i = 0; i < 8; ++i) {
    auto client = MakeTransport(fmt::format("/job:master/task:{}", i), false);
    ASSERT_TRUE(client->Connect((*server)->listen_address()).ok());
    auto now = client->Call("/job:worker/task:0", 2, "", std::chrono::seconds(5));
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    client->CallAsync("/job:worker/task:0", 1, "", std::chrono::seconds(30),
                      [](Result<std::string>) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the request arrives
  }
  EXPECT_GE((*server)->stats().peer_states, 1u);
  uint64_t states = 0;
  for (int i = 0; i < 100; ++i) {
    states = (*server)->stats().peer_states;
    if (states == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(states, 0u);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(slow.size(), 8u);
  }
  for (auto& t : slow) t.join();
  // It serves the next client as ever.
  auto next = MakeTransport("/job:master/task:9", false);
  ASSERT_TRUE(next->Connect((*server)->listen_address()).ok());
  auto answered = next->Call("/job:worker/task:0", 2, "", std::chrono::seconds(5));
  ASSERT_TRUE(answered.ok()) << answered.status().ToString();
  EXPECT_EQ(*answered, "now");
}

// A reply over its method's limit never comes in: the call ends with ResourceExhausted naming
// the task and the method (a worker cannot make its master take in a gigabyte for a list of
// devices); other methods' replies are not limited by it.
TEST(UcxTransportTest, AReplyOverItsMethodsLimitIsRefused) {
  auto server = MakeTransport("/job:worker/task:0", true);
  auto client = MakeTransport("/job:master/task:0", false);
  ASSERT_TRUE(server && client);
  server->SetCallHandler([](const Transport::CallInfo&, std::string, Transport::Reply reply) {
    reply(std::string(2 << 20, 'r'));  // 2 MiB, by UCX's rendezvous protocol
  });
  client->SetReplyLimit(1, 1 << 20);
  ASSERT_TRUE(client->Connect(server->listen_address()).ok());
  auto refused = client->Call("/job:worker/task:0", 1, "", std::chrono::seconds(10));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("task /job:worker/task:0 answered request"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("(method 1) with 2097152 bytes, over the 1048576"),
            std::string::npos)
      << refused.status().ToString();
  auto fine = client->Call("/job:worker/task:0", 2, "", std::chrono::seconds(10));
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(fine->size(), size_t{2} << 20);
}

// The refusal (the caller's side is the transport conformance suite's) is logged where it
// happened.
TEST(UcxTransportTest, AWrongTokenIsLoggedByTheListener) {
  TestLog server_log;  // outlives the server, whose thread logs
  auto server = MakeTransport("/job:worker/task:0", true, &server_log);
  auto client = MakeTransport("/job:worker/task:1", false, nullptr, "not-the-token");
  EXPECT_EQ(client->Connect(server->listen_address()).status().code(),
            StatusCode::kPermissionDenied);
  // The listener logs on its own thread, maybe after the client heard the refusal.
  const std::string line = server_log.WaitFor("refused a connection");
  ASSERT_FALSE(line.empty());
  EXPECT_NE(line.find("wrong cluster token"), std::string::npos) << line;
}

TEST(UcxTransportTest, BadOptionsAndAddressesAreInvalidArguments) {
  UcxTransportOptions o;
  o.task = "worker:1";
  EXPECT_EQ(UcxTransport::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.task = "/job:worker/task:1";
  o.listen_address = "127.0.0.1";
  auto r = UcxTransport::Create(o);
  EXPECT_TRUE(MessageHas(r.status(), {"127.0.0.1", "HOST:PORT"})) << r.status().ToString();
  o.listen_address = "";
  for (const char* bad : {"12x", "", "-5"}) {
    setenv("DFLOW_BY_REFERENCE_BYTES", bad, 1);
    auto env = UcxTransport::Create(o);
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(MessageHas(env.status(), {"DFLOW_BY_REFERENCE_BYTES", bad})) << bad;
  }
  unsetenv("DFLOW_BY_REFERENCE_BYTES");
  auto t = UcxTransport::Create(o).value();
  EXPECT_TRUE(MessageHas(t->Connect("127.0.0.1:99999").status(), {"port over 65535"}));
}

// The child half of the kill test: run by the test below in a fresh process of this binary.
TEST(UcxTransportChild, ConnectAndWait) {
  const char* address = std::getenv("DFLOW_UCX_TEST_CONNECT");
  if (address == nullptr) GTEST_SKIP() << "run by KilledPeerFailsTheStepWithinTwoSeconds";
  auto t = MakeTransport("/job:worker/task:1", false);
  ASSERT_TRUE(t->Connect(address).ok());
  std::this_thread::sleep_for(std::chrono::seconds(30));  // killed long before
}

// A peer killed (its connection resets) or stopped (it stays connected and silent, as behind a
// link that went down) fails a waiting Recv within two seconds, naming the peer.
void PeerLossFailsTheStepWithinTwoSeconds(int sig, const char* words) {
  auto server = MakeTransport("/job:worker/task:0", true);
  std::string env = "DFLOW_UCX_TEST_CONNECT=" + server->listen_address();
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=UcxTransportChild.ConnectAndWait";
  char self[] = "/proc/self/exe";
  char* argv[] = {self, filter.data(), nullptr};
  pid_t child;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server->peers().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server->peers(), std::vector<std::string>{"/job:worker/task:1"});
  auto r = server->Create(4).value();
  RecvResult got;
  RendezvousKey key = KeyTo("x:0", 4);
  key.src_device = "/job:worker/task:1/device:CPU:0";
  key.dst_device = "/job:worker/task:0/device:CPU:0";
  r->RecvAsync(key, Expect(DType::kF32, Shape{1}, CpuAllocator::Default()), got.Callback());
  auto killed = std::chrono::steady_clock::now();
  kill(child, sig);
  bool failed = got.Wait(std::chrono::seconds(2));
  auto took = std::chrono::steady_clock::now() - killed;
  int wstatus = 0;
  kill(child, SIGKILL);
  waitpid(child, &wstatus, 0);
  ASSERT_TRUE(failed) << "the Recv still waits 2 s after the peer was killed";
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(got.status(), {"/job:worker/task:1", words})) << got.status().ToString();
  std::printf("peer loss noticed %.1f ms after signal %d\n",
              std::chrono::duration<double, std::milli>(took).count(), sig);
}

TEST(UcxTransportTest, KilledPeerFailsTheStepWithinTwoSeconds) {
  PeerLossFailsTheStepWithinTwoSeconds(SIGKILL, "lost the connection");
}

TEST(UcxTransportTest, SilentPeerFailsTheStepWithinTwoSeconds) {
  PeerLossFailsTheStepWithinTwoSeconds(SIGSTOP, "nothing heard from it");
}

// --- requests ---------------------------------------------------------------------------------

// A thread waiting for a Recv polls the transports (as the executor does, framework/progress.h):
// the tensors arrive, small and large, copied and mapped, and the polls that moved them are
// counted; with polled_by_steps off the progress thread alone moves them.
TEST(UcxTransportTest, AThreadThatWaitsForARecvMovesTheTensorsItself) {
  for (bool polled : {true, false}) {
    Pair pair(64 << 10, polled);
    auto device_memory = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:0");
    int64_t step = 0;
    for (int64_t n : {1, 1000, 1 << 16, 1 << 20}) {
      for (int round = 0; round < 10; ++round) {
        ++step;
        auto s = pair.sender->Create(step).value();
        auto r = pair.receiver->Create(step).value();
        Tensor t(DType::kF32, Shape{n});
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i % 977 + round);
        RecvResult got;
        RendezvousKey key = KeyTo("x:0", step);
        r->RecvAsync(key, Expect(DType::kF32, Shape{n}, device_memory.get()), got.Callback());
        ASSERT_TRUE(s->Send(key, {"send_x"}, t).ok());
        {
          PollingScope polling;
          EXPECT_EQ(polling.empty(), !polled);
          auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!got.arrived() && std::chrono::steady_clock::now() < until) polling.Poll();
        }
        ASSERT_TRUE(got.Wait()) << n << " elements";
        ASSERT_TRUE(got.status().ok()) << got.status().ToString();
        ASSERT_EQ(std::memcmp(got.tensor().raw_data(), t.raw_data(), t.num_bytes()), 0) << n;
      }
    }
    EXPECT_EQ(pair.receiver->stats().tensors_received, 40u);
    const uint64_t polls =
        pair.receiver->stats().step_thread_polls + pair.sender->stats().step_thread_polls;
    if (polled) {
      EXPECT_GT(polls, 0u);
    } else {
      EXPECT_EQ(polls, 0u);
    }
  }
}

// While a thread polls without a break, the progress thread still does what only it does:
// calls with deadlines are answered, and a silent peer would still be noticed.
TEST(UcxTransportCallTest, CallsAreAnsweredWhileAThreadPollsWithoutABreak) {
  Pair pair;
  pair.receiver->SetCallHandler([](const UcxTransport::CallInfo&, std::string payload,
                                   UcxTransport::Reply reply) { reply("re:" + payload); });
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    PollingScope polling;
    while (!stop) polling.Poll();
  });
  for (int i = 0; i < 50; ++i) {
    auto r =
        pair.sender->Call("/job:localhost/task:0", 5, std::to_string(i), std::chrono::seconds(10));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, "re:" + std::to_string(i));
  }
  // A call to a task that does not answer in time still meets its deadline.
  pair.receiver->SetCallHandler(
      [](const UcxTransport::CallInfo&, std::string p, UcxTransport::Reply reply) {
        if (p == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(300));
        reply(p);
      });
  auto late = pair.sender->Call("/job:localhost/task:0", 5, "slow", std::chrono::milliseconds(50));
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded) << late.status().ToString();
  auto next = pair.sender->Call("/job:localhost/task:0", 5, "next", std::chrono::seconds(5));
  EXPECT_TRUE(next.ok() && *next == "next") << next.status().ToString();
  stop = true;
  poller.join();
}

// An idle transport sleeps on its event fd.
TEST(UcxTransportTest, IdleTransportsUseAlmostNoCpu) {
  Pair pair;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  timespec a, b;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  double cpu_ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  // Two transports, each with its progress thread (and UCX's own): under 1% of a core each.
  EXPECT_LT(cpu_ms, 20.0);
  std::printf("two idle transports used %.2f ms of CPU in 1 s\n", cpu_ms);
}

}  // namespace
// Issue 31: a port in use showed UCX's raw bind error, then "Device is busy". Now one error
// naming the address and the cause.
TEST(UcxTransportTest, AnAddressInUseIsNamedWithItsCause) {
  auto first = MakeTransport("/job:worker/task:0", /*listen=*/true);
  ASSERT_NE(first, nullptr);
  const std::string taken = first->listen_address();
  UcxTransportOptions o;
  o.task = "/job:worker/task:1";
  o.token = kToken;
  o.listen_address = taken;
  auto second = UcxTransport::Create(std::move(o));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(testing::MessageHas(second.status(), {"cannot listen on " + taken, "in use"}))
      << second.status().ToString();
  EXPECT_EQ(second.status().message().find("busy"), std::string::npos);
}

}  // namespace dflow::transport
