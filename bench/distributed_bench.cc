// Across processes (scripts/bench.sh compares with ucx_perftest on the same transport):
//   BM_SendRecvLatency     8-byte tensors bounced off a peer process: one-way latency
//                          (half the round trip), through UcxTransport's rendezvous, each
//                          side answering from its Recv's callback;
//   BM_SendRecvBandwidth   4 MiB tensors streamed to a peer process (two in flight), each acked;
//                          both with argument 0: over TCP (loopback), 1: over shared memory
//                          (UcxTransportOptions::shared_memory; UCX picks its lanes);
//   BM_DistributedStepOverhead  a step of one tiny node on each of two dflow-workers, from the
//                          master and back;
//   BM_ModelParallelStep2Proc   the wide MLP's training step (placer_bench's) over two
//                          dflow-workers of one core each, against two in-process devices;
//   BM_PipelineStep2Proc   placer_bench's pipelined step (two stages, 1F1B, 8 micro-batches) with
//                          each stage on a dflow-worker of one core;
//   BM_AllReduce2Proc      the ring all-reduce of 256 KiB, 4 MiB and 64 MiB between two
//                          dflow-workers (scripts/bench.sh: against MPI_Allreduce and gloo);
//                          DFLOW_ALLREDUCE_TRACE=FILE writes FILE.BYTES, a timeline of three
//                          steps of each size;
//   BM_DataParallelMlp2Proc     the MLP trained by two replicas on two dflow-workers (against
//                          PyTorch DistributedDataParallel on two processes); DFLOW_DP_TRACE=FILE
//                          writes a timeline of five of its steps first;
//   BM_RecoveryTime        from a worker's kill to the first step after recovery (restart
//                          excluded).
//
// The peer of the first two is this program again:
// `distributed_bench --peer ADDRESS lat|bw tcp|shm`.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "bench/wide_mlp.h"
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "placer/pipeline.h"
#include "rewrite/all_reduce.h"
#include "rewrite/replicate.h"
#include "runtime/calibration.h"
#include "runtime/step_trace.h"
#include "runtime/train/checkpointer.h"
#include "transport/ucx/ucx_transport.h"

namespace dflow {
namespace {

constexpr char kToken[] = "bench-token";
constexpr char kBenchTask[] = "/job:bench/task:0";
constexpr char kPeerTask[] = "/job:bench/task:1";
constexpr int kWindow = 2;
constexpr int64_t kBigElements = (4 << 20) / 4;
// The ring all-reduce's chunks: each a Send/Recv of its own, so a chunk is summed while the next
// is on its way.
constexpr int64_t kAllReduceChunk = 512 << 10;

std::string g_self;  // this program, for the peer

// Keys of message i belong to step i / kPerStep + 1, as a real step's keys do: a step's
// bookkeeping stays small (one step for the whole run would grow its maps without bound).
constexpr int64_t kPerStep = 500;

RendezvousKey Key(const char* from, const char* to, const std::string& tensor, int64_t i) {
  RendezvousKey k;
  k.src_device = std::string(from) + "/device:CPU:0";
  k.dst_device = std::string(to) + "/device:CPU:0";
  k.tensor = tensor;
  k.step_id = i / kPerStep + 1;
  return k;
}

RecvArgs Expect(int64_t elements) {
  RecvArgs a;
  a.node = "recv";
  a.dtype = DType::kF32;
  a.shape = Shape{elements};
  a.allocator = CpuAllocator::Default();
  return a;
}

// The peer: answers every "ping:i" with "pong:i" (latency) or every "data:i" with "ack:i"
// (bandwidth), keeping receives posted ahead, until killed.
int RunPeer(const std::string& address, const std::string& mode, const std::string& medium) {
  transport::UcxTransportOptions o;
  o.task = kPeerTask;
  o.token = kToken;
  o.shared_memory = medium == "shm";
  auto t = transport::UcxTransport::Create(o);
  if (!t.ok() || !(*t)->Connect(address).ok()) return 1;
  auto r = (*t)->Create(1);
  if (!r.ok()) return 1;
  Rendezvous* rv = r->get();
  const bool lat = mode == "lat";
  const int64_t elements = lat ? 2 : kBigElements;
  Tensor reply(DType::kF32, Shape{2});
  std::function<void(int64_t)> post = [&](int64_t i) {
    std::string in = fmt::format("{}:{}", lat ? "ping" : "data", i);
    rv->RecvAsync(Key(kBenchTask, kPeerTask, in, i), Expect(elements),
                  [&, i](const Status& s, const Tensor&) {
                    if (!s.ok()) {
                      std::fprintf(stderr, "distributed_bench peer: %s\n", s.ToString().c_str());
                      std::_Exit(1);
                    }
                    (void)rv->Send(Key(kPeerTask, kBenchTask,
                                       fmt::format("{}:{}", lat ? "pong" : "ack", i), i),
                                   {"reply"}, reply);
                    post(i + (lat ? 1 : kWindow));
                  });
  };
  for (int64_t i = 0; i < (lat ? 1 : kWindow); ++i) post(i);
  std::this_thread::sleep_for(std::chrono::hours(1));
  return 0;
}

// A transport with a peer process connected to it, and the step's rendezvous.
struct PeerLink {
  std::unique_ptr<transport::UcxTransport> transport;
  std::unique_ptr<Rendezvous> rendezvous;
  pid_t pid = -1;

  PeerLink(const std::string& mode, bool shared_memory) {
    transport::UcxTransportOptions o;
    o.task = kBenchTask;
    o.token = kToken;
    o.shared_memory = shared_memory;
    o.listen_address = "127.0.0.1:0";
    transport = std::move(transport::UcxTransport::Create(o)).value();
    std::string address = transport->listen_address();
    pid = fork();
    if (pid == 0) {
      execl(g_self.c_str(), g_self.c_str(), "--peer", address.c_str(), mode.c_str(),
            shared_memory ? "shm" : "tcp", nullptr);
      std::_Exit(127);
    }
    for (int i = 0; i < 2000 && transport->peers().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rendezvous = std::move(transport->Create(1)).value();
  }
  ~PeerLink() {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) || (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)) {
      std::fprintf(stderr, "distributed_bench: the peer ended early (%s %d)\n",
                   WIFEXITED(status) ? "exit" : "signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    rendezvous.reset();
  }
};

class Waiter {
 public:
  Rendezvous::DoneCallback Callback() {
    return [this](const Status& s, const Tensor&) {
      std::lock_guard lock(mu_);
      if (!s.ok() && !failed_) {
        failed_ = true;
        error_ = s.ToString();
      }
      done_++;
      cv_.notify_all();
    };
  }
  bool WaitFor(int n) {
    std::unique_lock lock(mu_);
    wanted_ = n;
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return done_ >= n; });
    return done_ >= n && !failed_;
  }
  // The first failure, or what is missing.
  std::string Error() {
    std::lock_guard lock(mu_);
    return failed_ ? error_ : fmt::format("{} of {} done in 10 s", done_, wanted_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int done_ = 0;
  int wanted_ = 0;
  bool failed_ = false;
  std::string error_;
};

// A chain of round trips run by the Recv callbacks (on the transport's progress thread), as the
// peer answers: the time from a Send to its Recv's callback in the other process, without this
// program's thread hand-offs (ucx_perftest also answers on its polling thread).
void BM_SendRecvLatency(benchmark::State& state) {
  constexpr int kRoundTrips = kPerStep;
  PeerLink link("lat", state.range(0) == 1);
  if (link.transport->peers().empty()) {
    state.SkipWithError("the peer did not connect");
    return;
  }
  Rendezvous* rv = link.rendezvous.get();
  Tensor ping(DType::kF32, Shape{2});  // 8 bytes
  int64_t i = 0;
  for (auto _ : state) {
    Waiter w;
    auto finished = w.Callback();
    const int64_t end = i + kRoundTrips;
    std::function<void(int64_t)> trip = [&](int64_t k) {
      rv->RecvAsync(Key(kPeerTask, kBenchTask, fmt::format("pong:{}", k), k), Expect(2),
                    [&, k](const Status& s, const Tensor& t) {
                      if (!s.ok() || k + 1 == end) {
                        finished(s, t);
                      } else {
                        trip(k + 1);
                      }
                    });
      Status s = rv->Send(Key(kBenchTask, kPeerTask, fmt::format("ping:{}", k), k), {"ping"}, ping);
      if (!s.ok()) finished(s, Tensor());
    };
    trip(i);
    if (!w.WaitFor(1)) {
      state.SkipWithError("a round trip failed");
      break;
    }
    i = end;
  }
  // One iteration is kRoundTrips round trips; one-way is half of each.
  state.counters["round_trips"] = kRoundTrips;
}

void BM_SendRecvBandwidth(benchmark::State& state) {
  PeerLink link("bw", state.range(0) == 1);
  if (link.transport->peers().empty()) {
    state.SkipWithError("the peer did not connect");
    return;
  }
  // One 4 MiB buffer sent under every key, as ucx_perftest sends one buffer over and over (eight
  // distinct ones would measure this machine's memory, not the transport: 32 MiB leave the
  // caches that 4 MiB fit in). Two in flight, one arriving while the other is copied out: each
  // lands in a buffer of its own (perftest receives every message into one), and eight of them
  // (32 MiB) measured this machine's memory too: 6.4 GB/s over shared memory against 8.3-8.9
  // with two.
  Tensor data(DType::kF32, Shape{kBigElements});
  std::memset(data.raw_data(), 1, data.num_bytes());
  int64_t i = 0;
  for (auto _ : state) {
    Waiter w;
    for (int k = 0; k < kWindow; ++k) {
      link.rendezvous->RecvAsync(Key(kPeerTask, kBenchTask, fmt::format("ack:{}", i + k), i + k),
                                 Expect(2), w.Callback());
    }
    for (int k = 0; k < kWindow; ++k) {
      (void)link.rendezvous->Send(Key(kBenchTask, kPeerTask, fmt::format("data:{}", i + k), i + k),
                                  {"data"}, data);
    }
    if (!w.WaitFor(kWindow)) {
      state.SkipWithError(("a transfer failed: " + w.Error()).c_str());
      break;
    }
    i += kWindow;
  }
  state.SetBytesProcessed(state.iterations() * kWindow * kBigElements * 4);
  state.counters["same_host"] = static_cast<double>(link.transport->stats().same_host_peers);
}

std::string WorkerBinary() {
  std::string dir = g_self.substr(0, g_self.rfind('/'));
  return dir + "/dflow-worker";
}

// Two dflow-workers of one core each (with `flags` besides), and the cluster that names them.
// The token file stays until the end, for a worker started again.
struct Workers {
  std::vector<std::unique_ptr<distributed::LocalWorker>> list;
  distributed::DistributedOptions cluster;
  std::vector<std::string> args;  // what each was started with
  ~Workers() {
    if (args.size() > 1) std::remove(args[1].c_str());
  }
};
Result<std::unique_ptr<Workers>> StartWorkers(const std::vector<std::string>& flags = {}) {
  auto w = std::make_unique<Workers>();
  ASSIGN_OR_RETURN(std::string token, distributed::WriteTokenFile("/tmp", kToken));
  w->args = {"--token-file", token, "--threads", "1"};
  w->args.insert(w->args.end(), flags.begin(), flags.end());
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(auto worker, distributed::LocalWorker::Start(WorkerBinary(), w->args));
    w->cluster.cluster.jobs["worker"].push_back(worker->address());
    w->list.push_back(std::move(worker));
  }
  w->cluster.token = kToken;
  return w;
}

void BM_DistributedStepOverhead(benchmark::State& state) {
  auto workers = StartWorkers();
  if (!workers.ok()) {
    state.SkipWithError(workers.status().ToString().c_str());
    return;
  }
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root.WithOpName("a").WithDevice("/job:worker/task:0/device:CPU:0"), 1.0f);
  auto b = ops::Const(root.WithOpName("b").WithDevice("/job:worker/task:1/device:CPU:0"), 2.0f);
  auto session = distributed::DistributedSession::Create(root.graph(), {}, (*workers)->cluster);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  for (int i = 0; i < 20; ++i) (void)(*session)->Run({}, {a.name(), b.name()});
  for (auto _ : state) {
    auto out = (*session)->Run({}, {a.name(), b.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
}

using bench::WideMlp;

void RunSteps(benchmark::State& state, Session& session, const WideMlp& m) {
  if (!session.Run({}, {}, m.init).ok()) {
    state.SkipWithError("init failed");
    return;
  }
  auto feeds = WideMlp::Batch();
  for (int i = 0; i < 3; ++i) (void)session.Run(feeds, {m.loss.name()}, {m.step.name()});
  for (auto _ : state) {
    auto out = session.Run(feeds, {m.loss.name()}, {m.step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  state.counters["predicted_ms"] = session.placement().predicted_step_s * 1e3;
}

// arg 0: two in-process devices; 1: two worker processes; 2: two worker processes placed again
// with the node times of five profiled steps (MeasuredNodeCosts as a cost file), which hold
// what calibration cannot see, such as two devices' MatMuls slowing each other down. The placer
// plans with 72 MiB per device, so the model must be split, and one core per device. Workers
// have twice that, as in examples/model_parallel_mlp: the placer does not yet count tensors
// received from other tasks.
void BM_ModelParallelStep2Proc(benchmark::State& state) {
  WideMlp m;
  SessionOptions options;
  options.placer.costs.unknown_dim = 128;
  options.device_memory_bytes = 72.0 * (1 << 20);
  if (state.range(0) == 0) {
    options.devices = {"cpu:0", "cpu:1"};
    auto session = Session::Create(m.root, options);
    if (!session.ok()) {
      state.SkipWithError(session.status().ToString().c_str());
      return;
    }
    RunSteps(state, **session, m);
    return;
  }
  auto workers = StartWorkers({"--memory-limit", "144MiB"});
  if (!workers.ok()) {
    state.SkipWithError(workers.status().ToString().c_str());
    return;
  }
  const distributed::DistributedOptions& cluster = (*workers)->cluster;
  auto session = distributed::DistributedSession::Create(m.root.graph(), options, cluster);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  if (state.range(0) == 2) {
    auto feeds = WideMlp::Batch();
    Status s = (*session)->Run({}, {}, m.init).status();
    for (int i = 0; i < 6 && s.ok(); ++i) {
      // The first step is not profiled: it compiles and plans memory.
      s = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()}, {.profile = i > 0}).status();
    }
    const std::string costs = fmt::format("/tmp/dflow-bench-costs-{}.json", getpid());
    if (s.ok()) s = (*session)->MeasuredNodeCosts().Save(costs);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    session->reset();  // the workers serve the next master
    options.cost_file = costs;
    session = distributed::DistributedSession::Create(m.root.graph(), options, cluster);
    std::remove(costs.c_str());
    if (!session.ok()) {
      state.SkipWithError(session.status().ToString().c_str());
      return;
    }
  }
  RunSteps(state, **session, m);
}

// The ring all-reduce (rewrite/all_reduce.h) between two dflow-workers of one core each, as
// scripts/bench.sh compares it with MPI_Allreduce and gloo on two processes: a step runs a chain
// of `chain` all-reduces (each of the previous one's result; mean, so values stay put) of
// variables of the given bytes, so the master's per-step overhead is spread over several
// all-reduces as in a training step. Reports the time of one all-reduce.
void BM_AllReduce2Proc(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int64_t chain = std::max<int64_t>(1, (int64_t{8} << 20) / bytes);
  auto workers = StartWorkers();
  if (!workers.ok()) {
    state.SkipWithError(workers.status().ToString().c_str());
    return;
  }
  Scope root = Scope::NewRootScope();
  const std::vector<std::string> devices = {"/job:worker/task:0/device:CPU:0",
                                            "/job:worker/task:1/device:CPU:0"};
  std::vector<Output> values;
  std::vector<std::string> init;
  for (size_t r = 0; r < devices.size(); ++r) {
    auto v = ops::InitializedVariable(root.WithDevice(devices[r]), Shape{bytes / 4},
                                      ops::Initializer::Constant(static_cast<double>(r + 1)));
    values.push_back(v.var);
    init.push_back(v.init.node_name());
  }
  for (int64_t i = 0; i < chain; ++i) {
    values = ops::AllReduce(root, values, devices, {ops::Reduction::kMean, kAllReduceChunk});
  }
  auto session = distributed::DistributedSession::Create(root.graph(), {}, (*workers)->cluster);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  std::vector<std::string> targets;
  for (const Output& v : values) targets.push_back(v.node_name());
  Status s = (*session)->Run({}, {}, init).status();
  for (int i = 0; i < 3 && s.ok(); ++i) s = (*session)->Run({}, {}, targets).status();
  // The values are 1 and 2 on the two devices: every mean is 1.5.
  auto check = (*session)->Run({}, {values[0].name()});
  if (s.ok() && check.ok() && (*check)[0].data<float>()[bytes / 4 - 1] != 1.5f) {
    s = Internal("the all-reduce gave {}, not 1.5", (*check)[0].data<float>()[bytes / 4 - 1]);
  }
  if (!s.ok() || !check.ok()) {
    state.SkipWithError((s.ok() ? check.status() : s).ToString().c_str());
    return;
  }
  if (const char* path = std::getenv("DFLOW_ALLREDUCE_TRACE")) {
    // A timeline of three steps of this size for chrome://tracing or ui.perfetto.dev.
    std::vector<StepTrace> traces(3);
    for (auto& t : traces) {
      Session::RunOptions traced;
      traced.trace = &t;
      (void)(*session)->Run({}, {}, targets, traced);
    }
    Status written = WriteChromeTrace(traces, fmt::format("{}.{}", path, bytes));
    if (!written.ok()) {
      state.SkipWithError(written.ToString().c_str());
      return;
    }
  }
  for (auto _ : state) {
    auto out = (*session)->Run({}, {}, targets);
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  state.counters["chain"] = static_cast<double>(chain);
  state.counters["bytes"] = static_cast<double>(bytes);
}

// Data parallelism: the MLP 784-512-512-10 (models_bench's) replicated on two dflow-workers of
// one core each (rewrite/replicate.h), SGD on a batch of 128 fed by the master, 64 a replica; the
// gradients averaged by the ring all-reduce. scripts/bench.sh compares it with PyTorch
// DistributedDataParallel (gloo) on two one-thread processes.
void BM_DataParallelMlp2Proc(benchmark::State& state) {
  auto workers = StartWorkers();
  if (!workers.ok()) {
    state.SkipWithError(workers.status().ToString().c_str());
    return;
  }
  WideMlp m(512, /*adam=*/false);
  ops::ReplicateOptions replicas;
  replicas.devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  replicas.averaged = {m.loss.node_name()};
  replicas.chunk_bytes = kAllReduceChunk;
  // Each worker gets its half of the batch from this process, as each DDP process reads its own.
  replicas.feed_shards = true;
  auto replicated = ops::Replicate(m.root.graph(), replicas);
  if (!replicated.ok()) {
    state.SkipWithError(replicated.status().ToString().c_str());
    return;
  }
  auto session =
      distributed::DistributedSession::Create(*replicated->graph, {}, (*workers)->cluster);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  Session::Feeds feeds;
  for (const auto& [name, whole] : WideMlp::Batch()) {
    for (int r = 0; r < 2; ++r) {
      std::vector<int64_t> dims = whole.shape().dim_vector();
      dims[0] /= 2;
      Tensor half(whole.dtype(), Shape(dims));
      std::memcpy(half.raw_data(),
                  static_cast<const char*>(whole.raw_data()) + r * half.num_bytes(),
                  half.num_bytes());
      feeds.emplace_back(ops::ReplicaName(name, r), half);
    }
  }
  Status s = (*session)->Run({}, {}, m.init).status();
  for (int i = 0; i < 5 && s.ok(); ++i)
    s = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()}).status();
  if (!s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  if (const char* path = std::getenv("DFLOW_DP_TRACE")) {
    // A timeline of five steps (every worker's nodes) for chrome://tracing or ui.perfetto.dev.
    std::vector<StepTrace> traces(5);
    for (auto& t : traces) {
      Session::RunOptions traced;
      traced.trace = &t;
      (void)(*session)->Run(feeds, {m.loss.name()}, {m.step.name()}, traced);
    }
    if (Status written = WriteChromeTrace(traces, path); !written.ok()) {
      state.SkipWithError(written.ToString().c_str());
      return;
    }
  }
  for (auto _ : state) {
    auto out = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  state.counters["examples_per_second"] = benchmark::Counter(
      128.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["buckets"] = replicated->buckets;
}

// Recovery from a lost worker: the wide MLP of the model-parallel benchmark on two workers is
// checkpointed, one worker is killed (SIGKILL), and the time from the kill to the end of the
// first step after recovery is measured, the worker's restart excluded: the failed step's
// detection, a new session (connect, measure links, place, compile), the checkpoint's restore
// and one step. Manual time: one recovery per iteration.
void BM_RecoveryTime(benchmark::State& state) {
  WideMlp m;
  SessionOptions options;
  options.placer.costs.unknown_dim = 128;
  options.device_memory_bytes = 72.0 * (1 << 20);
  const std::string dir = fmt::format("/tmp/dflow-bench-recovery-{}", getpid());
  const auto feeds = WideMlp::Batch();
  double restart_s = 0;
  for (auto _ : state) {
    auto workers = StartWorkers({"--memory-limit", "144MiB"});
    if (!workers.ok()) {
      state.SkipWithError(workers.status().ToString().c_str());
      return;
    }
    const distributed::DistributedOptions& cluster = (*workers)->cluster;
    auto session = distributed::DistributedSession::Create(m.root.graph(), options, cluster);
    Status s = session.ok() ? (*session)->Run({}, {}, m.init).status() : session.status();
    for (int i = 0; i < 3 && s.ok(); ++i) {
      s = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()}).status();
    }
    std::filesystem::remove_all(dir);
    auto ckpt = Checkpointer::Create({.dir = dir});
    if (s.ok()) s = ckpt.ok() ? (*ckpt)->Save(**session, 3) : ckpt.status();
    if (s.ok()) s = (*ckpt)->Flush();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    const auto killed = std::chrono::steady_clock::now();
    (*workers)->list[1]->Stop(SIGKILL);
    Status failed = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()}).status();
    if (failed.code() != StatusCode::kUnavailable) {
      state.SkipWithError(("the step after the kill: " + failed.ToString()).c_str());
      return;
    }
    session->reset();
    const auto restart = std::chrono::steady_clock::now();
    auto back = distributed::LocalWorker::Start(WorkerBinary(), (*workers)->args,
                                                cluster.cluster.jobs.at("worker")[1]);
    const double restart_this =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - restart).count();
    if (!back.ok()) {
      state.SkipWithError(back.status().ToString().c_str());
      return;
    }
    session = distributed::DistributedSession::Create(m.root.graph(), options, cluster);
    s = session.ok() ? Checkpointer::RestoreNewest(**session, dir).status() : session.status();
    if (s.ok()) s = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()}).status();
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    restart_s += restart_this;
    state.SetIterationTime(total - restart_this);
    session->reset();
  }
  std::filesystem::remove_all(dir);
  state.counters["restart_s"] = restart_s / static_cast<double>(state.iterations());
}

BENCHMARK(BM_SendRecvLatency)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_SendRecvBandwidth)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_AllReduce2Proc)
    ->Arg(256 << 10)
    ->Arg(4 << 20)
    ->Arg(64 << 20)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_DataParallelMlp2Proc)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(BM_RecoveryTime)->Unit(benchmark::kMillisecond)->Iterations(3)->UseManualTime();
BENCHMARK(BM_DistributedStepOverhead)->Unit(benchmark::kMicrosecond)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_ModelParallelStep2Proc)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();

// Pipeline parallelism across processes: placer_bench's BM_PipelineStep/3 (bench::DeepMlp, batch
// kPipelineBatch, two stages planned with kPipelineLimit each, 1F1B, 8 micro-batches) with the
// stages on two dflow-workers of one core each. The workers have twice the limit, as in
// BM_ModelParallelStep2Proc (received tensors are not counted by the placer yet). Reports the
// plan's predicted step.
void BM_PipelineStep2Proc(benchmark::State& state) {
  bench::DeepMlp m(bench::kPipelineLayers, bench::kPipelineWidth, bench::kPipelineInputs);
  auto workers = StartWorkers({"--memory-limit", "128MiB"});
  if (!workers.ok()) {
    state.SkipWithError(workers.status().ToString().c_str());
    return;
  }
  // The plan's figures: this host's CPU as calibrated with one thread, as the workers run.
  auto calibration = CachedCpuCalibration(1);
  if (!calibration.ok()) {
    state.SkipWithError(calibration.status().ToString().c_str());
    return;
  }
  PipelineOptions pipeline;
  DeviceSet set;
  for (int t = 0; t < 2; ++t) {
    DeviceSpec spec = calibration->Apply({});
    spec.name = DeviceName::Full("worker", t, "CPU", 0);
    spec.memory_bytes = bench::kPipelineLimit;
    if (Status s = set.Add(spec); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    pipeline.devices.push_back(spec.name.ToString());
  }
  pipeline.micro_batches = 8;
  pipeline.schedule = PipelineSchedule::k1F1B;
  pipeline.loss = m.loss.node_name();
  pipeline.device_set = &set;
  pipeline.costs.unknown_dim = bench::kPipelineBatch;
  auto piped = Pipeline(m.root.graph(), pipeline);
  if (!piped.ok()) {
    state.SkipWithError(piped.status().ToString().c_str());
    return;
  }
  SessionOptions options;
  options.device_memory_bytes = bench::kPipelineLimit;
  options.placer.costs.unknown_dim = bench::kPipelineBatch / pipeline.micro_batches;
  auto session =
      distributed::DistributedSession::Create(*piped->graph, options, (*workers)->cluster);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  if (Status s = (*session)->Run({}, {}, m.init).status(); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  const Session::Feeds feeds = m.Batch(bench::kPipelineBatch);
  for (int i = 0; i < 3; ++i) (void)(*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
  for (auto _ : state) {
    auto out = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  state.counters["predicted_ms"] = piped->plan.predicted_step_s * 1e3;
}
BENCHMARK(BM_PipelineStep2Proc)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();

}  // namespace
}  // namespace dflow

int main(int argc, char** argv) {
  dflow::g_self = "/proc/self/exe";
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) dflow::g_self.assign(path, static_cast<size_t>(n));
  if (argc == 5 && std::strcmp(argv[1], "--peer") == 0) {
    return dflow::RunPeer(argv[2], argv[3], argv[4]);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
