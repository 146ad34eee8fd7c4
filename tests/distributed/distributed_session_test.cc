// A graph across worker processes (tools/dflow_worker.cc, started here on loopback) against the
// same graph in this process.
#include "distributed/distributed_session.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <tuple>

#include "distributed/cluster_spec.h"
#include "distributed/elastic.h"
#include "distributed/local_worker.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
#include "gpu_required.h"
#include "ops/array_ops.h"
#include "ops/cuda/cuda_device.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "rewrite/all_reduce.h"
#include "rewrite/replicate.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/trainer.h"
#include "serialization/checkpoint_file.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "status_matchers.h"
#include "test_util.h"
#include "tools/subprocess.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

TEST(DistributedSessionTest, MlpTrainsAcrossTwoWorkerProcessesAsInOne) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty());
  ASSERT_FALSE(w1.address().empty());
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto dist = DistributedSession::Create(model.root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  EXPECT_EQ((*dist)->device_set().size(), 2);
  EXPECT_GT((*dist)->placement().cross_edges, 0);
  // Each worker timed its link to the other, and the placer uses those figures.
  ASSERT_EQ((*dist)->links().size(), 2u);
  for (const auto& link : (*dist)->links()) {
    EXPECT_NE(link.from, link.to);
    EXPECT_GT(link.latency_s, 1e-7) << link.from << " -> " << link.to;
    EXPECT_LT(link.latency_s, 0.05) << link.from << " -> " << link.to;
    EXPECT_GT(link.bandwidth, 1e7) << link.from << " -> " << link.to;  // loopback: > 10 MB/s
    const LinkSpec used = (*dist)->device_set().Link(link.from == "/job:worker/task:0" ? 0 : 1,
                                                     link.from == "/job:worker/task:0" ? 1 : 0);
    EXPECT_DOUBLE_EQ(used.bandwidth, link.bandwidth);
    EXPECT_DOUBLE_EQ(used.latency_s, link.latency_s);
  }

  // The same graph in this process, every node on one device.
  std::unique_ptr<Session> local = TrainsAsOnOneDevice(**dist, model);
  ASSERT_NE(local, nullptr);
  // A traced step: the nodes of both workers' devices, on this host's steady clock, with every
  // Recv paired with a Send of the other task.
  StepTrace trace;
  const int64_t before = TraceClockNs();
  ASSERT_TRUE(
      (*dist)->Run(MlpBatch(9), {model.loss.name()}, {model.step.name()}, {.trace = &trace}).ok());
  const int64_t after = TraceClockNs();
  ASSERT_TRUE(local->Run(MlpBatch(9), {}, {model.step.name()}).ok());  // in step
  EXPECT_EQ(trace.step, 6);                                            // init, four steps, this one
  ASSERT_EQ(trace.devices.size(), 2u);
  std::map<std::string, std::string> send_device;  // transfer key -> device of its Send
  int recvs = 0;
  for (const DeviceTrace& d : trace.devices) {
    EXPECT_TRUE(d.device == "/job:worker/task:0/device:CPU:0" ||
                d.device == "/job:worker/task:1/device:CPU:0")
        << d.device;
    EXPECT_FALSE(d.nodes.empty()) << d.device;
    for (const TracedNode& n : d.nodes) {
      EXPECT_LE(before, n.span.start_ns) << n.name;
      EXPECT_LE(n.span.start_ns, n.span.end_ns) << n.name;
      EXPECT_LE(n.span.end_ns, after) << n.name;
      if (n.op == "_Send") send_device[n.transfer] = d.device;
    }
  }
  for (const DeviceTrace& d : trace.devices) {
    for (const TracedNode& n : d.nodes) {
      if (n.op != "_Recv") continue;
      ++recvs;
      ASSERT_TRUE(send_device.count(n.transfer)) << n.transfer;
      EXPECT_NE(send_device[n.transfer], d.device) << n.transfer;
    }
  }
  EXPECT_EQ(recvs, (*dist)->placement().cross_edges);
  // The timeline draws an arrow per transfer: a flow start ("ph": "s") for each.
  const std::string json = ChromeTraceJson({trace});
  size_t arrows = 0;
  for (size_t at = json.find("\"ph\":\"s\""); at != std::string::npos;
       at = json.find("\"ph\":\"s\"", at + 1)) {
    ++arrows;
  }
  EXPECT_EQ(arrows, static_cast<size_t>(recvs));

  // A profiled step: every compute node of the step has a time, whichever worker ran it, and
  // a placer loading them takes them as the nodes' costs.
  EXPECT_TRUE((*dist)->MeasuredNodeCosts().seconds.empty());
  ASSERT_TRUE(
      (*dist)->Run(MlpBatch(10), {model.loss.name()}, {model.step.name()}, {.profile = true}).ok());
  ASSERT_TRUE(local->Run(MlpBatch(10), {}, {model.step.name()}).ok());
  MeasuredCosts measured = (*dist)->MeasuredNodeCosts();
  ASSERT_EQ(measured.seconds.size(), 1u);
  const auto& cpu = measured.seconds["CPU"];
  size_t traced_compute = 0;
  double total = 0;
  for (const DeviceTrace& d : trace.devices) {
    for (const TracedNode& n : d.nodes) {
      if (n.op == "_Send" || n.op == "_Recv") {
        EXPECT_FALSE(cpu.count(n.name)) << n.name;
        continue;
      }
      ++traced_compute;
      ASSERT_TRUE(cpu.count(n.name)) << n.name;
      EXPECT_GE(cpu.at(n.name), 0) << n.name;
      EXPECT_LT(cpu.at(n.name), 1) << n.name;
      total += cpu.at(n.name);
    }
  }
  EXPECT_EQ(cpu.size(), traced_compute);
  EXPECT_GT(total, 1e-4);  // two layers' MatMuls at least

  // The trained weights, read back from both workers.
  for (size_t i = 0; i < model.weights.size(); ++i) {
    auto d = (*dist)->Run({}, {model.weights[i].name()});
    auto l = local->Run({}, {model.weights[i].name()});
    ASSERT_TRUE(d.ok() && l.ok());
    auto dv = (*d)[0].ToVector<float>(), lv = (*l)[0].ToVector<float>();
    ASSERT_EQ(dv.size(), lv.size());
    for (size_t k = 0; k < dv.size(); ++k) ASSERT_NEAR(dv[k], lv[k], 1e-5f) << i << "," << k;
  }
}

// Element-wise work split over three devices in two processes is exact.
TEST(DistributedSessionTest, ElementwiseDagOverThreeDevicesIsExact) {
  WorkerProcess w0("cpu:0,cpu:1"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  const char* devices[] = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1",
                           "/job:worker/task:1/device:CPU:0", ""};
  auto build = [&](bool pinned) {
    Scope root = Scope::NewRootScope();
    auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{1000});
    auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{1000});
    std::vector<Output> values = {a, b};
    std::mt19937 gen(11);
    for (int i = 0; i < 40; ++i) {
      const char* device = devices[gen() % 3];  // drawn either way: both graphs are the same
      Scope s = root.WithOpName(fmt::format("n{}", i)).WithDevice(pinned ? device : devices[3]);
      Output x = values[gen() % values.size()], y = values[gen() % values.size()];
      switch (gen() % 4) {
        case 0:
          values.push_back(ops::Add(s, x, y));
          break;
        case 1:
          values.push_back(ops::Mul(s, x, ops::Sub(s.WithOpName(fmt::format("s{}", i)), y, x)));
          break;
        case 2:
          values.push_back(ops::Neg(s, x));
          break;
        default:
          values.push_back(ops::Maximum(s, x, y));
          break;
      }
    }
    return std::make_pair(root, values);
  };
  auto [dist_root, dist_values] = build(true);
  auto [local_root, local_values] = build(false);
  auto dist = DistributedSession::Create(dist_root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Session::Create(local_root);
  ASSERT_TRUE(local.ok());
  std::vector<std::string> fetches, local_fetches;
  for (size_t i = 2; i < dist_values.size(); i += 3) {
    fetches.push_back(dist_values[i].name());
    local_fetches.push_back(local_values[i].name());
  }
  std::vector<float> av(1000), bv(1000);
  std::mt19937 gen(5);
  for (auto& v : av) v = std::uniform_real_distribution<float>(-2, 2)(gen);
  for (auto& v : bv) v = std::uniform_real_distribution<float>(-2, 2)(gen);
  Session::Feeds feeds = {{"a", Tensor::FromVector(av, Shape{1000})},
                          {"b", Tensor::FromVector(bv, Shape{1000})}};
  auto d = (*dist)->Run(feeds, fetches);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto l = (*local)->Run(feeds, local_fetches);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  for (size_t i = 0; i < fetches.size(); ++i) {
    EXPECT_EQ((*d)[i].ToVector<float>(), (*l)[i].ToVector<float>()) << fetches[i];
  }
  EXPECT_GT((*dist)->placement().cross_edges, 0);
}

// GPU tensors between two worker processes of this host go by CUDA IPC (a DeviceTensorRef over
// UCX, the receiver's GPU copying out of the sender's exported block): the values are the CPU's.
TEST(DistributedSessionTest, GpuTensorsBetweenWorkersOfOneHostGoByCudaIpc) {
  std::string why;
  DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  WorkerProcess w0("cpu:0,gpu:0"), w1("cpu:0,gpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  auto build = [](bool pinned) {
    auto on = [&](const char* device) { return pinned ? device : ""; };
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1 << 20});
    auto a = ops::Mul(root.WithOpName("a").WithDevice(on("/job:worker/task:0/device:GPU:0")), x, x);
    auto b = ops::Relu(
        root.WithOpName("b").WithDevice(on("/job:worker/task:1/device:GPU:0")),
        ops::Sub(root.WithOpName("s").WithDevice(on("/job:worker/task:1/device:GPU:0")), a, x));
    auto c = ops::Add(root.WithOpName("c").WithDevice(on("/job:worker/task:0/device:GPU:0")), b, a);
    return std::make_pair(root, c);
  };
  auto [dist_root, dist_c] = build(true);
  auto [local_root, local_c] = build(false);
  auto dist = DistributedSession::Create(dist_root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Session::Create(local_root);
  ASSERT_TRUE(local.ok());
  Session::Feeds feeds = {
      {"x", Tensor::FromVector(testing::RandomFloats(1 << 20, 9, -2, 2), Shape{1 << 20})}};
  for (int step = 0; step < 3; ++step) {  // the handles are opened once, then reused
    auto d = (*dist)->Run(feeds, {dist_c.name()});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto l = (*local)->Run(feeds, {local_c.name()});
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ((*d)[0].ToVector<float>(), (*l)[0].ToVector<float>()) << "step " << step;
  }
}

TEST(DistributedSessionTest, AWorkersNodeErrorReachesTheMasterNamingTheNode) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{-1, -1});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{-1, -1});
  auto first = ops::Neg(root.WithOpName("first").WithDevice("/job:worker/task:0/device:CPU:0"), a);
  auto bad = ops::MatMul(
      root.WithOpName("bad_matmul").WithDevice("/job:worker/task:1/device:CPU:0"), first, b);
  auto dist = DistributedSession::Create(root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  Session::Feeds feeds = {{"a", Tensor(DType::kF32, Shape{2, 3})},
                          {"b", Tensor(DType::kF32, Shape{4, 5})}};
  for (auto& [n, t] : feeds) std::fill(t.flat<float>().begin(), t.flat<float>().end(), 1.0f);
  auto r = (*dist)->Run(feeds, {bad.name()}, {}, {.timeout = std::chrono::seconds(10)});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(MessageHas(r.status(), {"bad_matmul"})) << r.status().ToString();
  // The session goes on: a good step runs.
  feeds[1].second = Tensor(DType::kF32, Shape{3, 2});
  std::fill(feeds[1].second.flat<float>().begin(), feeds[1].second.flat<float>().end(), 1.0f);
  auto ok = (*dist)->Run(feeds, {bad.name()});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[0].ToVector<float>(), std::vector<float>(4, -3.0f));
}

TEST(DistributedSessionTest, AWrongTokenOrAMissingWorkerNamesTheTask) {
  WorkerProcess w0("cpu:0");
  Scope root = Scope::NewRootScope();
  ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{1});
  auto refused = DistributedSession::Create(root.graph(), {}, Cluster({&w0}, "other-token"));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(MessageHas(refused.status(), {"/job:worker/task:0", "token"}))
      << refused.status().ToString();
  DistributedOptions gone = Cluster({&w0});
  gone.cluster.jobs["worker"].push_back("127.0.0.1:1");  // nobody listens there
  auto missing = DistributedSession::Create(root.graph(), {}, gone);
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(missing.status(), {"/job:worker/task:1", "127.0.0.1:1"}))
      << missing.status().ToString();
}

// kill -9 of a worker in the middle of a step: the step fails on every task within 2 s, with
// Unavailable naming the lost task, and the master returns.
TEST(DistributedSessionTest, AKilledWorkerFailsTheStepWithinTwoSeconds) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  Scope root = Scope::NewRootScope();
  // Seconds of MatMuls on task 0, whose result task 1 waits for.
  Scope t0 = root.WithDevice("/job:worker/task:0/device:CPU:0");
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{1024, 1024});
  Output h = a;
  for (int i = 0; i < 200; ++i) h = ops::MatMul(t0, h, a);
  auto out = ops::Neg(root.WithOpName("out").WithDevice("/job:worker/task:1/device:CPU:0"), h);
  auto dist = DistributedSession::Create(root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  Tensor x(DType::kF32, Shape{1024, 1024});
  std::fill(x.flat<float>().begin(), x.flat<float>().end(), 0.0f);
  Result<std::vector<Tensor>> r = Internal("not run");
  std::chrono::steady_clock::time_point returned;
  std::thread run([&] {
    r = (*dist)->Run({{"a", x}}, {out.name()});
    returned = std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto killed = std::chrono::steady_clock::now();
  w0.Stop(SIGKILL);
  run.join();
  ASSERT_FALSE(r.ok()) << "the step finished before the kill; make it longer";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_TRUE(MessageHas(r.status(), {"/job:worker/task:0"})) << r.status().ToString();
  EXPECT_LT(returned - killed, std::chrono::seconds(2));
  std::printf("the master's Run returned %.1f ms after kill -9 of task 0: %s\n",
              std::chrono::duration<double, std::milli>(returned - killed).count(),
              r.status().ToString().c_str());
}

// A worker keeps a named job's variables for the next master of that job, and drops them once
// none has been connected for --release-after. A master of no job sees none of them, and its
// own job ends with it.
TEST(DistributedSessionTest, AWorkerReleasesAGoneMastersState) {
  WorkerProcess w("cpu:0", kToken, "1");
  auto graph = [] {
    Scope root = Scope::NewRootScope().WithDevice("/job:worker/task:0/device:CPU:0");
    auto v = ops::InitializedVariable(root.WithOpName("v"), Shape{3}, ops::Initializer::Zeros());
    return std::make_tuple(root, v.var, v.init);
  };
  auto [root, var, init] = graph();
  DistributedOptions named = Cluster({&w});
  named.job = "training-7";
  {
    auto first = DistributedSession::Create(root.graph(), {}, named);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE((*first)->Run({}, {}, {init.node_name()}).ok());
    ASSERT_TRUE((*first)->Run({}, {var.name()}).ok());
  }
  {
    // Another job's master finds no such variable.
    auto other = DistributedSession::Create(root.graph(), {}, Cluster({&w}));
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    auto unseen = (*other)->Run({}, {var.name()});
    ASSERT_FALSE(unseen.ok());
    EXPECT_TRUE(MessageHas(unseen.status(), {"v", "uninitialised"})) << unseen.status().ToString();
  }
  {
    // Right away, the next master of the job finds the variable as the last one left it.
    auto second = DistributedSession::Create(root.graph(), {}, named);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    auto kept = (*second)->Run({}, {var.name()});
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    EXPECT_EQ((*kept)[0].ToVector<float>(), std::vector<float>(3, 0.0f));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  auto third = DistributedSession::Create(root.graph(), {}, named);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  auto dropped = (*third)->Run({}, {var.name()});
  ASSERT_FALSE(dropped.ok());
  EXPECT_TRUE(MessageHas(dropped.status(), {"v"})) << dropped.status().ToString();
}

// A checkpoint gathers the variables from every worker; restoring sets them on every worker.
TEST(DistributedSessionTest, CheckpointsSaveAndRestoreVariablesOnEveryWorker) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto dist = DistributedSession::Create(model.root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  const std::string path = ::testing::TempDir() + "/dflow_distributed.dfckpt";
  Status uninitialised = (*dist)->SaveCheckpoint(path);
  EXPECT_EQ(uninitialised.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(uninitialised, {"uninitialised", path})) << uninitialised.ToString();

  ASSERT_TRUE((*dist)->Run({}, {}, model.init).ok());
  ASSERT_TRUE((*dist)->Run(MlpBatch(1), {}, {model.step.name()}).ok());
  std::vector<std::string> names;
  for (const auto& w : model.weights) names.push_back(w.name());
  auto trained = (*dist)->Run({}, names);
  ASSERT_TRUE(trained.ok());
  ASSERT_TRUE((*dist)->SaveCheckpoint(path).ok());
  // Train on, then restore: the weights are the saved ones again, on both workers.
  ASSERT_TRUE((*dist)->Run(MlpBatch(2), {}, {model.step.name()}).ok());
  auto moved = (*dist)->Run({}, names);
  ASSERT_TRUE(moved.ok());
  EXPECT_NE((*moved)[0].ToVector<float>(), (*trained)[0].ToVector<float>());
  Status restored = (*dist)->RestoreCheckpoint(path);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  auto back = (*dist)->Run({}, names);
  ASSERT_TRUE(back.ok());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ((*back)[i].ToVector<float>(), (*trained)[i].ToVector<float>()) << names[i];
  }
  // The file holds what a local session of the same graph restores.
  Mlp local_model("", "");
  auto local = Session::Create(local_model.root);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE((*local)->RestoreCheckpoint(path).ok());
  auto local_values = (*local)->Run({}, {local_model.weights[2].name()});
  ASSERT_TRUE(local_values.ok());
  EXPECT_EQ((*local_values)[0].ToVector<float>(), (*trained)[2].ToVector<float>());
}

// A checkpoint of any size: with a chunk of 4 KiB, the MLP's 1.6 MB first layer travels in about
// 400 slices each way (its replies are limited to the chunk and some slack, so sending it whole
// would fail), and the file equals the one saved in one piece per task; restoring it in slices
// sets every variable back, on both workers.
TEST(DistributedSessionTest, CheckpointsTravelInBoundedChunks) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0", 512);
  DistributedOptions whole_options = Cluster({&w0, &w1});
  whole_options.job = "chunks";  // the second master shares the first's variables on purpose
  DistributedOptions chunked_options = whole_options;
  chunked_options.checkpoint_chunk_bytes = 4 << 10;
  auto whole = DistributedSession::Create(model.root.graph(), {}, whole_options);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_TRUE((*whole)->Run({}, {}, model.init).ok());
  ASSERT_TRUE((*whole)->Run(MlpBatch(1), {}, {model.step.name()}).ok());
  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE((*whole)->SaveCheckpoint(dir + "/dflow_whole.dfckpt").ok());
  // A second master over the same workers and variables, reading them in chunks.
  auto chunked = DistributedSession::Create(model.root.graph(), {}, chunked_options);
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  Status saved = (*chunked)->SaveCheckpoint(dir + "/dflow_chunked.dfckpt");
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  auto a = serialization::LoadCheckpoint(dir + "/dflow_whole.dfckpt");
  auto b = serialization::LoadCheckpoint(dir + "/dflow_chunked.dfckpt");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, value] : *a) {
    ASSERT_TRUE(b->count(name)) << name;
    EXPECT_EQ(b->at(name).shape(), value.shape()) << name;
    EXPECT_EQ(b->at(name).ToVector<float>(), value.ToVector<float>()) << name;
  }
  // Train on, then restore in chunks: every variable is the saved one again.
  std::vector<std::string> names;
  for (const auto& w : model.weights) names.push_back(w.name());
  ASSERT_TRUE((*chunked)->Run(MlpBatch(2), {}, {model.step.name()}).ok());
  Status restored = (*chunked)->RestoreCheckpoint(dir + "/dflow_chunked.dfckpt");
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  auto back = (*chunked)->Run({}, names);
  ASSERT_TRUE(back.ok());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ((*back)[i].ToVector<float>(), a->at(model.weights[i].node_name()).ToVector<float>())
        << names[i];
  }
  // A chunk below one byte is refused, naming the option.
  DistributedOptions bad = whole_options;
  bad.checkpoint_chunk_bytes = 0;
  auto refused = DistributedSession::Create(model.root.graph(), {}, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(refused.status(), {"checkpoint_chunk_bytes", "0"}));
}

// dflow-run runs a graph file across the workers of a cluster spec.
TEST(DistributedSessionTest, DflowRunRunsAGraphFileAcrossTheCluster) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{3});
  auto twice = ops::Add(root.WithOpName("twice").WithDevice("worker:0/cpu:0"), a, a);
  ops::Neg(root.WithOpName("out").WithDevice("worker:1/cpu:0"), twice);
  const std::string dir = ::testing::TempDir();
  const std::string graph = dir + "/dflow_run_cluster.dfg";
  const std::string feed = dir + "/dflow_run_cluster_a.npy";
  const std::string cluster = dir + "/dflow_run_cluster.json";
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_TRUE(serialization::WriteNpy(Tensor::FromVector<float>({1, 2, 3}, Shape{3}), feed).ok());
  {
    std::ofstream c(cluster);
    c << fmt::format("{{\"worker\": [\"{}\", \"{}\"]}}", w0.address(), w1.address());
  }
  auto token = WriteTokenFile(dir, kToken);
  ASSERT_TRUE(token.ok());
  auto ran = tools::RunProgram({DFLOW_RUN_BINARY, graph, "--cluster", cluster, "--token-file",
                                *token, "--feed", "a=" + feed, "--fetch", "out"},
                               "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0) << ran->err;
  EXPECT_NE(ran->out.find("-2"), std::string::npos) << ran->out;
  EXPECT_NE(ran->out.find("-6"), std::string::npos) << ran->out;
  EXPECT_NE(ran->err.find("worker:1/cpu:0"), std::string::npos) << ran->err;  // the placement
  EXPECT_NE(ran->err.find("link /job:worker/task:0 -> /job:worker/task:1: "), std::string::npos)
      << ran->err;
  // --job names the run's job on the workers; without a cluster it is a usage error.
  auto named =
      tools::RunProgram({DFLOW_RUN_BINARY, graph, "--cluster", cluster, "--token-file", *token,
                         "--job", "run-7", "--feed", "a=" + feed, "--fetch", "out"},
                        "");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->exit_code, 0) << named->err;
  EXPECT_NE(named->out.find("-6"), std::string::npos) << named->out;
  auto alone = tools::RunProgram({DFLOW_RUN_BINARY, graph, "--job", "run-7", "--fetch", "out"}, "");
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->exit_code, 2) << alone->err;
  EXPECT_NE(alone->err.find("--job goes with --cluster or --rendezvous"), std::string::npos)
      << alone->err;
  // --devices does not go with --cluster.
  auto both = tools::RunProgram({DFLOW_RUN_BINARY, graph, "--cluster", cluster, "--token-file",
                                 *token, "--devices", "cpu:0", "--fetch", "out"},
                                "");
  ASSERT_TRUE(both.ok());
  EXPECT_NE(both->exit_code, 0);
  EXPECT_NE(both->err.find("--devices and --cluster"), std::string::npos) << both->err;
}

TEST(DistributedSessionTest, DflowDotDrawsOneBoxPerTaskWithItsDevicesInside) {
  WorkerProcess w0("cpu:0,cpu:1"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  Scope root = Scope::NewRootScope();
  auto a =
      ops::Placeholder(root.WithOpName("a").WithDevice("worker:0/cpu:0"), DType::kF32, Shape{3});
  auto b = ops::Neg(root.WithOpName("b").WithDevice("worker:0/cpu:1"), a);
  ops::Neg(root.WithOpName("c").WithDevice("worker:1/cpu:0"), b);
  const std::string dir = ::testing::TempDir();
  const std::string graph = dir + "/dflow_dot_cluster.dfg";
  const std::string cluster = dir + "/dflow_dot_cluster.json";
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  {
    std::ofstream c(cluster);
    c << fmt::format("{{\"worker\": [\"{}\", \"{}\"]}}", w0.address(), w1.address());
  }
  auto token = WriteTokenFile(dir, kToken);
  ASSERT_TRUE(token.ok());
  auto ran = tools::RunProgram(
      {DFLOW_DOT_BINARY, graph, "--cluster", cluster, "--token-file", *token}, "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  ASSERT_EQ(ran->exit_code, 0) << ran->err;
  const std::string& dot = ran->out;
  // Task 0's box holds its two devices and their nodes; task 1's holds the rest.
  size_t t0 = dot.find("subgraph cluster_task_0 {\n    label=\"/job:worker/task:0\"");
  size_t t1 = dot.find("subgraph cluster_task_1 {\n    label=\"/job:worker/task:1\"");
  ASSERT_NE(t0, std::string::npos) << dot;
  ASSERT_NE(t1, std::string::npos) << dot;
  ASSERT_LT(t0, t1);
  std::string task0 = dot.substr(t0, t1 - t0), task1 = dot.substr(t1);
  EXPECT_NE(task0.find("label=\"device:CPU:0\""), std::string::npos) << task0;
  EXPECT_NE(task0.find("label=\"device:CPU:1\""), std::string::npos) << task0;
  EXPECT_NE(task0.find("\"a\" [label="), std::string::npos) << task0;
  EXPECT_NE(task0.find("\"b\" [label="), std::string::npos) << task0;
  EXPECT_NE(task1.find("\"c\" [label="), std::string::npos) << task1;
  EXPECT_EQ(task1.find("device:CPU:1"), std::string::npos) << task1;
  EXPECT_NE(ran->err.find("2 tasks, 3 devices, 3 nodes, 2 cross-device edges"), std::string::npos)
      << ran->err;
  // A token file that cannot be read is named.
  auto missing = tools::RunProgram(
      {DFLOW_DOT_BINARY, graph, "--cluster", cluster, "--token-file", dir + "/no_such_token"}, "");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 1);
  EXPECT_NE(missing->err.find("no_such_token"), std::string::npos) << missing->err;
}

// The master (dflow-run) is killed with -9 in the middle of its steps: the workers abort what
// they ran for it and serve the next master at once.
TEST(DistributedSessionTest, AKilledMasterLeavesWorkersThatServeTheNextOne) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{256, 256});
  Output h = a;
  for (int k = 0; k < 20; ++k) {
    Scope s = root.WithDevice(fmt::format("worker:{}/cpu:0", k % 2));
    h = ops::Tanh(s, ops::MatMul(s, h, a));  // each hop crosses between the workers
  }
  ops::ReduceSum(root.WithOpName("out"), h, {0, 1});
  const std::string dir = ::testing::TempDir();
  const std::string graph = dir + "/killed_master.dfg";
  const std::string feed = dir + "/killed_master_a.npy";
  const std::string cluster = dir + "/killed_master.json";
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_TRUE(serialization::WriteNpy(Tensor(DType::kF32, Shape{256, 256}), feed).ok());
  {
    std::ofstream c(cluster);
    c << fmt::format("{{\"worker\": [\"{}\", \"{}\"]}}", w0.address(), w1.address());
  }
  auto token = WriteTokenFile(dir, kToken);
  ASSERT_TRUE(token.ok());
  auto master = LocalProcess({DFLOW_RUN_BINARY, graph, "--cluster", cluster, "--token-file", *token,
                              "--feed", "a=" + feed, "--fetch", "out", "--steps", "1000000"});
  ASSERT_GT(master, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // steps under way
  kill(master, SIGKILL);
  waitpid(master, nullptr, 0);
  // A new master right away: the same workers, new steps, right results.
  Scope again = Scope::NewRootScope();
  auto x = ops::Placeholder(again.WithOpName("x"), DType::kF32, Shape{2});
  auto y = ops::Neg(again.WithOpName("y").WithDevice("worker:0/cpu:0"), x);
  auto z = ops::Add(again.WithOpName("z").WithDevice("worker:1/cpu:0"), y, y);
  auto next = DistributedSession::Create(again.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  for (int i = 0; i < 3; ++i) {
    auto r = (*next)->Run({{"x", Tensor::FromVector<float>({1, 2}, Shape{2})}}, {z.name()});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)[0].ToVector<float>(), (std::vector<float>{-2, -4}));
  }
}

TEST(DistributedSessionTest, AWorkerExitsCleanlyOnSigterm) {
  WorkerProcess w("cpu:0");
  ASSERT_FALSE(w.address().empty());
  int status = w.Stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace dflow::distributed
