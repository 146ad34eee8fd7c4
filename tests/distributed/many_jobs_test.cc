// Many jobs on one worker: two masters train two different models on the same two dflow-worker
// processes at once, each naming the workers its own way, and a tool's look at a live cluster
// (dflow-dot --cluster) leaves the job it looks at as it was.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "distributed/distributed_session.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
#include "serialization/graph_file.h"
#include "status_matchers.h"
#include "tools/subprocess.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

constexpr char kFirst[] = "/job:worker/task:0/device:CPU:0";
constexpr char kSecond[] = "/job:worker/task:1/device:CPU:0";

TEST(ManyJobsTest, TwoMastersTrainTwoModelsOnTheSameTwoWorkersAtOnce) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  // Master A names w0 task:0 and w1 task:1, which the workers keep; master B lists them the
  // other way round, so its task:0 is the worker that calls itself task:1.
  Mlp a_model(kFirst, kSecond, 64), b_model(kFirst, kSecond, 32);
  auto a = DistributedSession::Create(a_model.root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = DistributedSession::Create(b_model.root.graph(), {}, Cluster({&w1, &w0}));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->master_task(), (*b)->master_task());
  EXPECT_EQ((*b)->task_names().Theirs("/job:worker/task:0"), "/job:worker/task:1");
  EXPECT_EQ((*b)->task_names().Theirs("/job:worker/task:1"), "/job:worker/task:0");
  EXPECT_FALSE((*a)->task_names().renamed());

  // A worker's error reaches B in B's names: B's task:0 is the worker named task:1 by A.
  auto early = (*b)->Run({}, {b_model.weights[0].name()});
  ASSERT_FALSE(early.ok());
  EXPECT_TRUE(MessageHas(early.status(), {"uninitialised", kFirst})) << early.status().ToString();
  EXPECT_FALSE(MessageHas(early.status(), {kSecond})) << early.status().ToString();

  // Both train at once, each to its one-process result. The two models' variables have the
  // same names and other shapes, so state shared between the jobs would fail them.
  std::unique_ptr<Session> a_local, b_local;
  std::thread other([&] { b_local = test_mlp::TrainsAsOnOneDevice(**b, b_model, 6, 32); });
  a_local = test_mlp::TrainsAsOnOneDevice(**a, a_model, 6, 64);
  other.join();
  ASSERT_NE(a_local, nullptr);
  ASSERT_NE(b_local, nullptr);

  // A traced step of B names B's devices.
  StepTrace trace;
  ASSERT_TRUE((*b)->Run(MlpBatch(7), {}, {b_model.step.name()}, {.trace = &trace}).ok());
  ASSERT_EQ(trace.devices.size(), 2u);
  for (const DeviceTrace& d : trace.devices) {
    EXPECT_TRUE(d.device == kFirst || d.device == kSecond) << d.device;
  }

  // A's departure leaves B's variables and steps alone.
  auto before = (*b)->Run({}, {b_model.weights[1].name()});
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  a->reset();
  auto after = (*b)->Run({}, {b_model.weights[1].name()});
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*after)[0].ToVector<float>(), (*before)[0].ToVector<float>());
  auto loss = (*b)->Run(MlpBatch(8), {b_model.loss.name()}, {b_model.step.name()});
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_TRUE(std::isfinite((*loss)[0].data<float>()[0]));
}

// Masters come and go (each a job of its own, ended as it leaves) while another trains on the
// same workers without a break: a departure fails only the steps waiting for the one who left.
TEST(ManyJobsTest, OneMastersDepartureLeavesAnothersStepsRunning) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  Mlp trained(kFirst, kSecond, 256);
  auto b = DistributedSession::Create(trained.root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*b)->Run({}, {}, trained.init).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  Status failed;
  std::thread runner([&] {
    while (!stop.load()) {
      auto r = (*b)->Run(MlpBatch(steps.load(), 128), {trained.loss.name()}, {trained.step.name()});
      if (!r.ok()) {
        failed = r.status();
        return;
      }
      steps++;
    }
  });
  for (int i = 0; i < 4 && failed.ok(); ++i) {
    Mlp visitor(kFirst, kSecond, 16);
    auto a = DistributedSession::Create(visitor.root.graph(), {}, Cluster({&w0, &w1}));
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!a.ok()) break;
    EXPECT_TRUE((*a)->Run({}, {}, visitor.init).ok());
    EXPECT_TRUE((*a)->Run(MlpBatch(i), {}, {visitor.step.name()}).ok());
  }  // each leaves here, saying goodbye to both workers mid-step of the other master
  const int during = steps.load();
  stop = true;
  runner.join();
  EXPECT_TRUE(failed.ok()) << failed.ToString();
  EXPECT_GT(during, 0);
}

// dflow-dot --cluster against the workers of a live job: it places its graph over their
// devices in a job of its own, ended when it exits; the live job's variables and steps go on.
TEST(ManyJobsTest, DflowDotAgainstALiveJobLeavesItUntouched) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  Mlp model(kFirst, kSecond);
  auto live = DistributedSession::Create(model.root.graph(), {}, Cluster({&w0, &w1}));
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_TRUE((*live)->Run({}, {}, model.init).ok());
  ASSERT_TRUE((*live)->Run(MlpBatch(1), {}, {model.step.name()}).ok());
  std::vector<std::string> names;
  for (const auto& w : model.weights) names.push_back(w.name());
  auto before = (*live)->Run({}, names);
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  // The same model's graph, so its variables have the live job's names.
  const std::string dir = ::testing::TempDir();
  const std::string graph = dir + "/many_jobs_dot.dfg";
  const std::string cluster = dir + "/many_jobs_dot.json";
  ASSERT_TRUE(serialization::SaveGraph(model.root.graph(), graph).ok());
  {
    std::ofstream c(cluster);
    c << fmt::format("{{\"worker\": [\"{}\", \"{}\"]}}", w1.address(), w0.address());
  }
  auto token = WriteTokenFile(dir, kToken);
  ASSERT_TRUE(token.ok());
  auto drawn = tools::RunProgram(
      {DFLOW_DOT_BINARY, graph, "--cluster", cluster, "--token-file", *token}, "");
  ASSERT_TRUE(drawn.ok()) << drawn.status().ToString();
  ASSERT_EQ(drawn->exit_code, 0) << drawn->err;
  EXPECT_NE(drawn->out.find("/job:worker/task:1"), std::string::npos) << drawn->out;

  auto after = (*live)->Run({}, names);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ((*after)[i].ToVector<float>(), (*before)[i].ToVector<float>()) << names[i];
  }
  std::unique_ptr<Session> local = test_mlp::TrainsAsOnOneDevice(**live, model);
  ASSERT_NE(local, nullptr);
}

}  // namespace
}  // namespace dflow::distributed
