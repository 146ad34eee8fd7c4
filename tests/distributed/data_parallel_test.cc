// Data parallelism across dflow-worker processes: the all-reduce's nodes, replicas and a
// parameter server task against the single replica trained in this process.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "distributed/distributed_session.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
#include "ops/array_ops.h"
#include "rewrite/all_reduce.h"
#include "rewrite/replicate.h"
#include "serialization/checkpoint_file.h"
#include "test_util.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

// The ring all-reduce's nodes across worker processes (one of them with two devices): every
// replica's sum against a plain loop, on integer values (exact in any order), for sizes below
// the replica count, not divisible by it, and large enough for UCX's rendezvous protocol.
TEST(DataParallelTest, AllReduceAcrossWorkerProcessesIsExact) {
  WorkerProcess w0("cpu:0,cpu:1"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  const std::vector<std::string> devices = {"/job:worker/task:0/device:CPU:0",
                                            "/job:worker/task:1/device:CPU:0",
                                            "/job:worker/task:0/device:CPU:1"};
  for (int64_t size : {int64_t{2}, int64_t{1001}, int64_t{300000}}) {
    SCOPED_TRACE(size);
    Scope root = Scope::NewRootScope();
    std::vector<Output> values;
    for (size_t r = 0; r < devices.size(); ++r) {
      values.push_back(ops::Placeholder(
          root.WithOpName(fmt::format("x{}", r)).WithDevice(devices[r]), DType::kF32, Shape{size}));
    }
    auto out = ops::AllReduce(root, values, devices, {ops::Reduction::kSum, 64 << 10});
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    auto dist = DistributedSession::Create(root.graph(), {}, Cluster({&w0, &w1}));
    ASSERT_TRUE(dist.ok()) << dist.status().ToString();
    std::mt19937 gen(static_cast<unsigned>(size));
    std::vector<float> want(size, 0.0f);
    Session::Feeds feeds;
    for (size_t r = 0; r < devices.size(); ++r) {
      std::vector<float> v(size);
      for (int64_t i = 0; i < size; ++i) {
        v[i] = static_cast<float>(static_cast<int>(gen() % 201) - 100);
        want[i] += v[i];
      }
      feeds.emplace_back(fmt::format("x{}", r), Tensor::FromVector(v, Shape{size}));
    }
    std::vector<std::string> fetches;
    for (const Output& o : out) fetches.push_back(o.name());
    auto got = (*dist)->Run(feeds, fetches);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (size_t r = 0; r < devices.size(); ++r) {
      EXPECT_EQ((*got)[r].ToVector<float>(), want) << devices[r];
    }
    EXPECT_GT((*dist)->placement().cross_edges, 0);
  }
}

// Initializes both sessions, then trains `model` in `replicated` and `single` in `local` on the
// same four batches: the losses agree step by step.
void FollowTheSingleReplica(Session& replicated, const Mlp& model, Session& local,
                            const Mlp& single) {
  ASSERT_TRUE(replicated.Run({}, {}, model.init).ok());
  ASSERT_TRUE(local.Run({}, {}, single.init).ok());
  for (int s = 0; s < 4; ++s) {
    auto feeds = MlpBatch(s);
    auto d = replicated.Run(feeds, {model.loss.name()}, {model.step.name()});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto l = local.Run(feeds, {single.loss.name()}, {single.step.name()});
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    const float dl = (*d)[0].data<float>()[0], ll = (*l)[0].data<float>()[0];
    EXPECT_NEAR(dl, ll, 1e-5f * std::max(1.0f, std::abs(ll))) << "step " << s;
  }
}

// Data parallelism across worker processes: the MLP replicated on N workers (rewrite/replicate.h),
// its gradients all-reduced between them, follows the single replica trained here on the whole
// batch; the first and last workers' variables stay equal.
void ReplicasOnWorkerProcessesFollowTheSingleReplica(int n) {
  SCOPED_TRACE(fmt::format("{} worker processes", n));
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  std::vector<const WorkerProcess*> cluster;
  Mlp model("", "");
  ops::ReplicateOptions options;
  for (int t = 0; t < n; ++t) {
    workers.push_back(std::make_unique<WorkerProcess>("cpu:0"));
    ASSERT_FALSE(workers.back()->address().empty());
    cluster.push_back(workers.back().get());
    options.devices.push_back(fmt::format("/job:worker/task:{}/device:CPU:0", t));
  }
  options.averaged = {model.loss.node_name()};
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  auto dist = DistributedSession::Create(*replicated->graph, {}, Cluster(cluster));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  Mlp local_model("", "");
  auto local = Session::Create(local_model.root);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  ASSERT_NO_FATAL_FAILURE(FollowTheSingleReplica(**dist, model, **local, local_model));
  const std::string w = model.weights[0].node_name();
  auto copies = (*dist)->Run({}, {w, fmt::format("replica{}/{}", n - 1, w)});
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  EXPECT_EQ((*copies)[0].ToVector<float>(), (*copies)[1].ToVector<float>());
  auto want = (*local)->Run({}, {local_model.weights[0].node_name()});
  ASSERT_TRUE(want.ok());
  const auto a = (*copies)[0].ToVector<float>(), b = (*want)[0].ToVector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f) << w << "[" << i << "]";

  // A checkpoint reads each mirrored variable once, from replica 0: the file holds the single
  // replica's variables, and restoring it sets the last replica's copy too.
  const std::string path = ::testing::TempDir() + fmt::format("/dp_mirrors_{}.dfckpt", n);
  ASSERT_TRUE((*dist)->SaveCheckpoint(path).ok());
  auto saved = serialization::LoadCheckpoint(path);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  auto single = (*local)->SnapshotVariables();
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(saved->size(), single->size());
  for (const auto& [name, value] : *saved) EXPECT_TRUE(single->count(name)) << name;
  ASSERT_TRUE((*dist)->Run(MlpBatch(11), {}, {model.step.name()}).ok());
  Status restored = (*dist)->RestoreCheckpoint(path);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  auto last = (*dist)->Run({}, {fmt::format("replica{}/{}", n - 1, w)});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ((*last)[0].ToVector<float>(), saved->at(w).ToVector<float>());
}

TEST(DataParallelTest, ReplicasOnTwoAndFourWorkerProcessesFollowTheSingleReplica) {
  ReplicasOnWorkerProcessesFollowTheSingleReplica(2);
  ReplicasOnWorkerProcessesFollowTheSingleReplica(4);
}

// Synchronous parameter servers across processes: two worker replicas, the variables and their
// updates on a ps task; the loss follows the single replica's.
TEST(DataParallelTest, ReplicasWithAParameterServerTaskFollowTheSingleReplica) {
  WorkerProcess w0("cpu:0"), w1("cpu:0"), ps("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty() || ps.address().empty());
  Mlp model("", "");
  ops::ReplicateOptions options;
  options.devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  options.parameter_servers = {"/job:ps/task:0/device:CPU:0"};
  options.averaged = {model.loss.node_name()};
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  DistributedOptions cluster = Cluster({&w0, &w1});
  cluster.cluster.jobs["ps"] = {ps.address()};
  auto dist = DistributedSession::Create(*replicated->graph, {}, cluster);
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  Mlp local_model("", "");
  auto local = Session::Create(local_model.root);
  ASSERT_TRUE(local.ok());
  ASSERT_NO_FATAL_FAILURE(FollowTheSingleReplica(**dist, model, **local, local_model));
  // The variables live on the ps task.
  const PlacementReport& placed = (*dist)->placement();
  const auto w = (*dist)->graph().FindNode(model.weights[0].node_name());
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ((*dist)->device_set().device(placed.device_of[*w]).name.ToString(),
            "/job:ps/task:0/device:CPU:0");
}

// What 8 threads running 3 asynchronous steps each (4 threads per replica) over 2 parameter
// servers and 2 workers saw: the steps that ended, with finite losses, and every failure.
struct ConcurrentSteps {
  int ended = 0;
  std::vector<Status> failures;
};

// The MLP replicated on two workers with its variables on two servers, asynchronously; every
// task started with `flags`.
ConcurrentSteps RunEightAsyncStepsAtOnce(const std::vector<std::string>& flags) {
  ConcurrentSteps result;
  WorkerProcess w0("cpu:0", kToken, "300", flags), w1("cpu:0", kToken, "300", flags),
      ps0("cpu:0", kToken, "300", flags), ps1("cpu:0", kToken, "300", flags);
  EXPECT_FALSE(w0.address().empty() || w1.address().empty() || ps0.address().empty() ||
               ps1.address().empty());
  Mlp model("", "");
  ops::ReplicateOptions options;
  options.devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  options.parameter_servers = {"/job:ps/task:0/device:CPU:0", "/job:ps/task:1/device:CPU:0"};
  options.mode = ops::ReplicateOptions::Mode::kAsync;
  options.averaged = {model.loss.node_name()};
  auto replicated = ops::Replicate(model.root.graph(), options);
  EXPECT_TRUE(replicated.ok()) << replicated.status().ToString();
  if (!replicated.ok()) return result;
  DistributedOptions cluster = Cluster({&w0, &w1});
  cluster.cluster.jobs["ps"] = {ps0.address(), ps1.address()};
  auto dist = DistributedSession::Create(*replicated->graph, {}, cluster);
  EXPECT_TRUE(dist.ok()) << dist.status().ToString();
  if (!dist.ok()) return result;
  EXPECT_TRUE((*dist)->Run({}, {}, model.init).ok());
  // Both servers hold variables, so every step spans all four tasks.
  std::set<std::string> servers;
  const PlacementReport& placed = (*dist)->placement();
  for (const auto& w : model.weights) {
    auto id = (*dist)->graph().FindNode(w.node_name());
    if (!id.has_value()) continue;
    servers.insert((*dist)->device_set().device(placed.device_of[*id]).name.ToString());
  }
  EXPECT_EQ(servers.size(), 2u);

  constexpr int kThreads = 8, kSteps = 3;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int r = t % 2;
      for (int s = 0; s < kSteps; ++s) {
        Session::Feeds feeds;
        for (auto& [name, value] : MlpBatch(t * kSteps + s)) {
          feeds.emplace_back(ops::ReplicaName(name, r), value);
        }
        Session::RunOptions run;
        run.timeout = std::chrono::seconds(60);
        auto got = (*dist)->Run(feeds, {ops::ReplicaName(model.loss.name(), r)},
                                {ops::ReplicaName(model.step.name(), r)}, run);
        std::lock_guard<std::mutex> lock(mu);
        if (!got.ok()) {
          result.failures.push_back(got.status());
        } else if (!std::isfinite((*got)[0].data<float>()[0])) {
          result.failures.push_back(Internal("thread {} step {}: loss not finite", t, s));
        } else {
          ++result.ended;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return result;
}

// Asynchronous parameter servers with more steps at once than a task had step threads: every
// partition of a step waits on the others (a worker's on both servers' variables, a server's on
// the worker's gradient), so tasks that queued steps behind running ones could leave each server
// running a different half, each waiting for the other's: none would end. (Measured with one
// step thread per task, as workers queued steps before: one run in four hit its 15 s deadline.)
// Every step must end, with a finite loss.
TEST(DataParallelTest, EightConcurrentAsyncStepsOverTwoServersAndTwoWorkersAllEnd) {
  ConcurrentSteps got = RunEightAsyncStepsAtOnce({"--max-concurrent-steps", "8"});
  std::vector<std::string> failures;
  for (const Status& s : got.failures) failures.push_back(s.ToString());
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
  EXPECT_EQ(got.ended, 24);
}

// Past --max-concurrent-steps a task refuses a step at once, naming itself and the flag, and the
// others go on.
TEST(DataParallelTest, AStepPastATasksLimitIsRefusedNamingTheTaskAndTheFlag) {
  ConcurrentSteps got = RunEightAsyncStepsAtOnce({"--max-concurrent-steps", "1"});
  ASSERT_FALSE(got.failures.empty()) << "8 steps at once never met a task's limit of 1";
  for (const Status& s : got.failures) {
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_TRUE(MessageHas(s, {"runs 1 step at once", "--max-concurrent-steps", "/job:"}))
        << s.ToString();
  }
  EXPECT_GT(got.ended, 0);
  EXPECT_EQ(got.ended + static_cast<int>(got.failures.size()), 24);
}

}  // namespace
}  // namespace dflow::distributed
