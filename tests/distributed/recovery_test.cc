// Training that survives a lost worker: TrainLoop's recovery from checkpoints (with the worker
// restarted by the test or by dflow-launch), elastic training with fewer replicas, and workers
// started by launchers.
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "distributed/cluster_spec.h"
#include "distributed/distributed_session.h"
#include "distributed/elastic.h"
#include "distributed/local_worker.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
#include "rewrite/replicate.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/trainer.h"
#include "test_util.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

// `n` random images and labels as a data set, the same for the same seed.
Dataset RandomImages(int64_t n, int seed) {
  Session::Feeds batch = MlpBatch(seed, n);
  return {batch[0].second, batch[1].second};
}

// TrainLoop with `o`, and `kill` called once the checkpoint of step 8 or later is on disk.
struct KilledRun {
  Status status;
  EpochStats last;  // of the last epoch
  bool killed = false;
};
KilledRun TrainAndKill(Session& session, Batcher& batches, const TrainLoopOptions& o,
                       const std::function<void()>& kill) {
  KilledRun run;
  std::atomic<bool> killed{false}, trained{false};
  std::thread killer([&] {
    for (int i = 0; i < 30000 && !killed && !trained; ++i) {
      auto files = Checkpointer::List(o.checkpoint_dir);
      if (!files.empty() && files[0].first >= 8) {
        kill();
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  run.status = TrainLoop(session, batches, o, [&](const EpochStats& e) {
    run.last = e;
    return Status::OK();
  });
  trained = true;
  killer.join();
  run.killed = killed;
  return run;
}

// Two dflow-workers of one thread each (a restarted one takes `args` too) and their cluster.
struct TwoWorkers {
  std::vector<std::string> args;
  Result<std::unique_ptr<LocalWorker>> w0 = Internal("not started"), w1 = Internal("not started");
  DistributedOptions cluster;
  void Start() {
    auto token = WriteTokenFile(::testing::TempDir(), kToken);
    ASSERT_TRUE(token.ok());
    args = {"--devices", "cpu:0", "--token-file", *token, "--threads", "1"};
    w0 = LocalWorker::Start(DFLOW_WORKER_BINARY, args);
    w1 = LocalWorker::Start(DFLOW_WORKER_BINARY, args);
    ASSERT_TRUE(w0.ok() && w1.ok());
    cluster.cluster.jobs["worker"] = {(*w0)->address(), (*w1)->address()};
    cluster.token = kToken;
  }
};

// The MLP trained in this process for `epochs` over `data` (batches of `batch`, seed 1) without
// a failure ends with the weights `session` holds for `model` (within 1e-4).
void ExpectTheWeightsOfAnUninterruptedRun(Session& session, const Mlp& model, const Dataset& data,
                                          int epochs, int64_t batch = 32) {
  Mlp local_model("", "");
  SessionOptions one_thread;
  one_thread.threads.num_threads = 1;  // as each worker's device
  auto local = Session::Create(local_model.root, one_thread);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE((*local)->Run({}, {}, local_model.init).ok());
  Batcher again(data, batch, 1);
  TrainLoopOptions plain{.epochs = epochs,
                         .loss = local_model.loss.name(),
                         .train_target = local_model.step.name(),
                         .progress = false};
  ASSERT_TRUE(TrainLoop(**local, again, plain, nullptr).ok());
  for (size_t l = 0; l < model.weights.size(); ++l) {
    auto got = session.Run({}, {model.weights[l].node_name()});
    auto want = (*local)->Run({}, {local_model.weights[l].node_name()});
    ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
    const auto a = (*got)[0].ToVector<float>(), b = (*want)[0].ToVector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-4f) << model.weights[l].node_name() << "[" << i << "]";
    }
  }
}

// 30 epochs of the MLP, a checkpoint every 4 steps into `dir` (emptied), 30 s to recover.
TrainLoopOptions RecoveringLoop(const Mlp& model, const std::string& dir) {
  std::filesystem::remove_all(dir);
  TrainLoopOptions o{.epochs = 30,
                     .loss = model.loss.name(),
                     .train_target = model.step.name(),
                     .progress = false};
  o.checkpoint_dir = dir;
  o.checkpoint_every_steps = 4;
  o.recovery_timeout_seconds = 30;
  return o;
}

// kill -9 of a worker in the middle of training: TrainLoop's reconnect restarts it at its address
// and makes a new session, the newest checkpoint is restored, and training goes on, redoing
// at most the checkpoint period of steps (the kill may fail the taking of a checkpoint too).
TEST(RecoveryTest, TrainLoopRecoversFromAKilledWorker) {
  TwoWorkers two;
  ASSERT_NO_FATAL_FAILURE(two.Start());
  const std::vector<std::string>& args = two.args;
  auto& w1 = two.w1;
  DistributedOptions& cluster = two.cluster;
  cluster.connect_timeout = std::chrono::seconds(10);
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto first = DistributedSession::Create(model.root.graph(), {}, cluster);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::unique_ptr<Session> session = std::move(first).value();
  ASSERT_TRUE(session->Run({}, {}, model.init).ok());

  Dataset data = RandomImages(320, 4);
  Batcher batches(data, 32, 1);  // 10 steps an epoch
  const std::string dir = ::testing::TempDir() + "/recovery_checkpoints";
  TrainLoopOptions o = RecoveringLoop(model, dir);
  std::unique_ptr<LocalWorker> restarted;
  int reconnects = 0;
  o.reconnect = [&]() -> Result<Session*> {
    ++reconnects;
    session.reset();  // the failed master goes first
    if (!restarted) {
      ASSIGN_OR_RETURN(restarted, LocalWorker::Start(DFLOW_WORKER_BINARY, args,
                                                     cluster.cluster.jobs["worker"][1]));
    }
    ASSIGN_OR_RETURN(auto s, DistributedSession::Create(model.root.graph(), {}, cluster));
    session = std::move(s);
    return session.get();
  };
  KilledRun run = TrainAndKill(*session, batches, o, [&] { (*w1)->Stop(SIGKILL); });
  const EpochStats& last = run.last;
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  ASSERT_TRUE(run.killed) << "training ended before the kill";
  EXPECT_EQ(last.recoveries, 1);
  EXPECT_GE(reconnects, 1);
  EXPECT_LE(last.steps_redone, o.checkpoint_every_steps);  // "redoes at most K steps"
  EXPECT_TRUE(std::isfinite(last.mean_loss));
  // The recovered run saw the batches an uninterrupted one sees (the restored checkpoint's
  // epoch is taken up where it was), so it ends with the same weights as training in one
  // process without a failure.
  ExpectTheWeightsOfAnUninterruptedRun(*session, model, data, 30);
  std::filesystem::remove_all(dir);
}

// A worker that hangs (SIGSTOP) while its heartbeats would take a minute to be missed (master
// and workers with a peer timeout of 60 s): the step deadline fails the step with
// DeadlineExceeded, recover_on_deadline treats it as a lost worker, and training goes on from
// the newest checkpoint with the worker replaced, ending as an uninterrupted run.
TEST(RecoveryTest, AStepDeadlineRecoversFromAHungWorker) {
  auto token = WriteTokenFile(::testing::TempDir(), kToken);
  ASSERT_TRUE(token.ok());
  const std::vector<std::string> args = {"--devices", "cpu:0", "--token-file",   *token,
                                         "--threads", "1",     "--peer-timeout", "60"};
  auto w0 = LocalWorker::Start(DFLOW_WORKER_BINARY, args);
  auto w1 = LocalWorker::Start(DFLOW_WORKER_BINARY, args);
  ASSERT_TRUE(w0.ok() && w1.ok());
  DistributedOptions cluster;
  cluster.cluster.jobs["worker"] = {(*w0)->address(), (*w1)->address()};
  cluster.token = kToken;
  cluster.peer_timeout = std::chrono::seconds(60);
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto first = DistributedSession::Create(model.root.graph(), {}, cluster);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::unique_ptr<Session> session = std::move(first).value();
  ASSERT_TRUE(session->Run({}, {}, model.init).ok());
  Dataset data = RandomImages(320, 4);
  Batcher batches(data, 32, 1);
  const std::string dir = ::testing::TempDir() + "/deadline_checkpoints";
  TrainLoopOptions o = RecoveringLoop(model, dir);
  o.epochs = 4;
  o.step_timeout_seconds = 2;
  o.recover_on_deadline = true;
  const pid_t hung = (*w1)->pid();
  std::unique_ptr<LocalWorker> replaced;
  o.reconnect = [&]() -> Result<Session*> {
    if (!replaced) {
      (*w1)->Stop(SIGKILL);  // the hung one goes for good; another takes its address
      ASSIGN_OR_RETURN(replaced, LocalWorker::Start(DFLOW_WORKER_BINARY, args,
                                                    cluster.cluster.jobs["worker"][1]));
    }
    session.reset();
    ASSIGN_OR_RETURN(auto s, DistributedSession::Create(model.root.graph(), {}, cluster));
    session = std::move(s);
    return session.get();
  };
  KilledRun run = TrainAndKill(*session, batches, o, [&] { kill(hung, SIGSTOP); });
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  ASSERT_TRUE(run.killed);
  EXPECT_EQ(run.last.recoveries, 1);
  ExpectTheWeightsOfAnUninterruptedRun(*session, model, data, 4);
  std::filesystem::remove_all(dir);
}

// How long the elastic tests' workers have to answer again after a failure: a worker that lives
// on can stall longer than a second when the suite runs it beside other multi-process tests
// under ASan on two cores (one did, and the job went on without it).
constexpr double kElasticWaitSeconds = 3;

// Elastic training: a worker killed for good; after ElasticOptions::wait_seconds the job goes
// on with the replica that is left, from the newest checkpoint. Two replicas on a batch train
// as one does, so the run still ends with the weights of training in one process.
TEST(RecoveryTest, ElasticTrainingGoesOnWithFewerReplicas) {
  TwoWorkers two;
  ASSERT_NO_FATAL_FAILURE(two.Start());
  auto& w0 = two.w0;
  auto& w1 = two.w1;
  DistributedOptions& cluster = two.cluster;
  Mlp model("", "");
  ops::ReplicateOptions replicate;
  replicate.averaged = {model.loss.node_name()};
  ElasticReplicas elastic(model.root.graph(), replicate, cluster, {},
                          {.wait_seconds = kElasticWaitSeconds, .batch_size = 32});
  auto started = elastic.Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(elastic.replicas(), 2);
  ASSERT_TRUE((*started)->Run({}, {}, model.init).ok());

  Dataset data = RandomImages(320, 4);
  Batcher batches(data, 32, 1);  // 10 steps an epoch
  const std::string dir = ::testing::TempDir() + "/elastic_checkpoints";
  TrainLoopOptions o = RecoveringLoop(model, dir);
  o.reconnect = [&] { return elastic.Reconnect(); };
  KilledRun run = TrainAndKill(**started, batches, o, [&] { (*w1)->Stop(SIGKILL); });
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  ASSERT_TRUE(run.killed) << "training ended before the kill";
  EXPECT_EQ(run.last.recoveries, 1);
  EXPECT_LE(run.last.steps_redone, o.checkpoint_every_steps);
  EXPECT_EQ(elastic.replicas(), 1);
  EXPECT_EQ(elastic.workers(), std::vector<std::string>{(*w0)->address()});

  ExpectTheWeightsOfAnUninterruptedRun(*elastic.session(), model, data, 30);
  std::filesystem::remove_all(dir);
}

// Elastic training over three workers, one killed for good: the first, a middle one or the last.
// Each probe and each new session names the workers left by their own task (a worker named task:2
// answers only as task:2), so the job goes on with the other two, keeping their names, and ends
// with the weights of training in one process.
class ElasticLossTest : public ::testing::TestWithParam<int> {};

TEST_P(ElasticLossTest, TrainingGoesOnWithTheOtherTwo) {
  const int lost = GetParam();
  auto token = WriteTokenFile(::testing::TempDir(), kToken);
  ASSERT_TRUE(token.ok());
  const std::vector<std::string> args = {"--devices", "cpu:0",     "--token-file",
                                         *token,      "--threads", "1"};
  std::vector<std::unique_ptr<LocalWorker>> workers;
  DistributedOptions cluster;
  cluster.token = kToken;
  for (int i = 0; i < 3; ++i) {
    auto w = LocalWorker::Start(DFLOW_WORKER_BINARY, args);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    cluster.cluster.jobs["worker"].push_back((*w)->address());
    workers.push_back(std::move(w).value());
  }
  Mlp model("", "");
  ops::ReplicateOptions replicate;
  replicate.averaged = {model.loss.node_name()};
  ElasticReplicas elastic(model.root.graph(), replicate, cluster, {},
                          {.wait_seconds = kElasticWaitSeconds, .batch_size = 24});
  auto started = elastic.Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(elastic.replicas(), 3);
  ASSERT_TRUE((*started)->Run({}, {}, model.init).ok());

  Dataset data = RandomImages(240, 6);
  Batcher batches(data, 24, 1);  // 10 steps an epoch, 8 a replica's share
  const std::string dir = ::testing::TempDir() + "/elastic_loss_" + std::to_string(lost);
  TrainLoopOptions o = RecoveringLoop(model, dir);
  o.epochs = 4;
  o.reconnect = [&] { return elastic.Reconnect(); };
  KilledRun run = TrainAndKill(**started, batches, o, [&] { workers[lost]->Stop(SIGKILL); });
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  ASSERT_TRUE(run.killed) << "training ended before the kill";
  EXPECT_EQ(run.last.recoveries, 1);
  EXPECT_EQ(elastic.replicas(), 2);
  std::vector<std::string> left = cluster.cluster.jobs["worker"];
  left.erase(left.begin() + lost);
  EXPECT_EQ(elastic.workers(), left);
  ExpectTheWeightsOfAnUninterruptedRun(*elastic.session(), model, data, 4, 24);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(FirstMiddleLast, ElasticLossTest, ::testing::Values(0, 1, 2));

TEST(RecoveryTest, ElasticReplicasAreSynchronousOnly) {
  Mlp model("", "");
  ops::ReplicateOptions replicate;
  replicate.mode = ops::ReplicateOptions::Mode::kAsync;
  DistributedOptions cluster;
  cluster.cluster.jobs["worker"] = {"127.0.0.1:1"};
  ElasticReplicas elastic(model.root.graph(), replicate, cluster, {}, {});
  auto started = elastic.Start();
  EXPECT_EQ(started.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(started.status(), {"only synchronous replicas fed whole batches"}));
  ElasticReplicas no_job(model.root.graph(), {}, cluster, {}, {.job = "trainer"});
  EXPECT_TRUE(MessageHas(no_job.Start().status(), {"no tasks of job 'trainer'"}));
}

// Under mpirun (or srun), a worker listens on its --listen port plus its rank.
TEST(RecoveryTest, AWorkerUnderALauncherListensOnThePortPlusItsRank) {
  auto token = WriteTokenFile(::testing::TempDir(), kToken);
  ASSERT_TRUE(token.ok());
  // A port the kernel hands out, the one above it free too when checked; another process may
  // still take it before the worker binds (the tests run side by side), so a few tries.
  auto bind_port = [](int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof(addr);
    int got = -1;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      got = ntohs(addr.sin_port);
    }
    close(fd);
    return got;
  };
  Status last;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int base = bind_port(0);
    if (base <= 0 || base >= 65535 || bind_port(base + 1) != base + 1) continue;
    auto w = LocalWorker::Start(DFLOW_WORKER_BINARY, {"--token-file", *token},
                                fmt::format("127.0.0.1:{}", base),
                                {"env", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"});
    if (!w.ok()) {
      last = w.status();
      continue;
    }
    EXPECT_EQ((*w)->address(), fmt::format("127.0.0.1:{}", base + 1));
    return;
  }
  FAIL() << "no worker started in 10 tries; the last: " << last.ToString();
}

// dflow-launch starts the workers and brings back one killed with -9; TrainLoop's reconnect only
// makes a new session, and training goes on from the newest checkpoint.
TEST(RecoveryTest, DflowLaunchRestartsAKilledWorkerAndTrainingGoesOn) {
  auto token = WriteTokenFile(::testing::TempDir(), kToken);
  ASSERT_TRUE(token.ok());
  const std::string dir = ::testing::TempDir() + "/launch_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string spec = dir + "/cluster.json", log = dir + "/launch.err";
  pid_t launcher = fork();
  if (launcher == 0) {
    freopen("/dev/null", "w", stdout);
    freopen(log.c_str(), "w", stderr);
    execl(DFLOW_LAUNCH_BINARY, DFLOW_LAUNCH_BINARY, "-n", "2", "--token-file", token->c_str(),
          "--cluster-out", spec.c_str(), "--", "--threads", "1", nullptr);
    std::_Exit(127);
  }
  for (int i = 0; i < 400 && !std::filesystem::exists(spec); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto loaded = ClusterSpec::Load(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  DistributedOptions cluster;
  cluster.cluster = *loaded;
  cluster.token = kToken;
  cluster.connect_timeout = std::chrono::seconds(10);
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto first = DistributedSession::Create(model.root.graph(), {}, cluster);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::unique_ptr<Session> session = std::move(first).value();
  ASSERT_TRUE(session->Run({}, {}, model.init).ok());
  Dataset data = RandomImages(320, 5);
  Batcher batches(data, 32, 1);
  TrainLoopOptions o{.epochs = 30,
                     .loss = model.loss.name(),
                     .train_target = model.step.name(),
                     .progress = false};
  o.checkpoint_dir = dir + "/checkpoints";
  o.checkpoint_every_steps = 4;
  o.recovery_timeout_seconds = 30;
  o.reconnect = [&]() -> Result<Session*> {
    session.reset();
    ASSIGN_OR_RETURN(auto s, DistributedSession::Create(model.root.graph(), {}, cluster));
    session = std::move(s);
    return session.get();
  };
  // Worker 1's pid, from dflow-launch's log; killed once the checkpoint of step 8 is written.
  std::ifstream in(log);
  std::string line;
  pid_t victim = -1;
  while (std::getline(in, line)) {
    if (sscanf(line.c_str(), "dflow-launch: worker 1 (pid %d)", &victim) == 1) break;
  }
  ASSERT_GT(victim, 0) << "no pid of worker 1 in " << log;
  KilledRun run = TrainAndKill(*session, batches, o, [&] { kill(victim, SIGKILL); });
  const EpochStats& last = run.last;
  EXPECT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_TRUE(run.killed);
  EXPECT_EQ(last.recoveries, 1);
  EXPECT_LE(last.steps_redone, o.checkpoint_every_steps);  // "redoes at most K steps"
  session.reset();
  kill(launcher, SIGTERM);
  int status = 0;
  waitpid(launcher, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::ifstream done(log);
  std::string all((std::istreambuf_iterator<char>(done)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("worker 1 at " + cluster.cluster.jobs["worker"][1] +
                     " killed by signal 9; restarting it"),
            std::string::npos)
      << all;
  std::filesystem::remove_all(dir);
}

// Asynchronous replicas with a parameter server task, one replica's worker killed mid-training
// and restarted: TrainLoop stops both replicas, restores the newest checkpoint into a new
// session and trains every epoch to its end. (Asynchronous SGD on these random labels is too
// erratic for a loss check: it ended above where it began in one run of eight.)
TEST(RecoveryTest, AsynchronousReplicasRecoverFromAKilledWorker) {
  TwoWorkers two;
  ASSERT_NO_FATAL_FAILURE(two.Start());
  auto ps = LocalWorker::Start(DFLOW_WORKER_BINARY, two.args);
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  DistributedOptions cluster = two.cluster;
  cluster.cluster.jobs["ps"] = {(*ps)->address()};
  Mlp model("", "");
  ops::ReplicateOptions options;
  options.devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  options.parameter_servers = {"/job:ps/task:0/device:CPU:0"};
  options.mode = ops::ReplicateOptions::Mode::kAsync;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  auto first = DistributedSession::Create(*replicated->graph, {}, cluster);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::unique_ptr<Session> session = std::move(first).value();
  ASSERT_TRUE(session->Run({}, {}, model.init).ok());

  Dataset data = RandomImages(320, 4);
  Batcher batches(data, 32, 1);
  TrainLoopOptions o = RecoveringLoop(model, ::testing::TempDir() + "/async_checkpoints");
  for (int r = 0; r < 2; ++r) {
    o.replicas.push_back({.images_feed = ops::ReplicaName("x", r),
                          .labels_feed = ops::ReplicaName("labels", r),
                          .loss = ops::ReplicaName(model.loss.name(), r),
                          .train_target = ops::ReplicaName(model.step.name(), r)});
  }
  std::unique_ptr<LocalWorker> restarted;
  o.reconnect = [&]() -> Result<Session*> {
    session.reset();
    if (!restarted) {
      ASSIGN_OR_RETURN(restarted, LocalWorker::Start(DFLOW_WORKER_BINARY, two.args,
                                                     cluster.cluster.jobs["worker"][1]));
    }
    ASSIGN_OR_RETURN(auto s, DistributedSession::Create(*replicated->graph, {}, cluster));
    session = std::move(s);
    return session.get();
  };
  std::vector<double> losses;
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    for (int i = 0; i < 30000 && !killed; ++i) {
      auto files = Checkpointer::List(o.checkpoint_dir);
      if (!files.empty() && files[0].first >= 8) {
        (*two.w1)->Stop(SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EpochStats last;
  Status st = TrainLoop(*session, batches, o, [&](const EpochStats& e) {
    losses.push_back(e.mean_loss);
    last = e;
    return Status::OK();
  });
  killed = true;
  killer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(last.recoveries, 1);
  EXPECT_EQ(last.epoch, 30);
  EXPECT_EQ(last.steps, 10);  // the last epoch whole
  // The steps since the checkpoint, and the other replica's step that was running.
  EXPECT_LE(last.steps_redone, o.checkpoint_every_steps + 1);
  ASSERT_GE(losses.size(), 30u);  // an epoch a recovery goes back into is reported again
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss));
  std::filesystem::remove_all(o.checkpoint_dir);
}

}  // namespace
}  // namespace dflow::distributed
