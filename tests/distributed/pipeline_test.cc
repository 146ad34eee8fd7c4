// Pipeline parallelism across dflow-worker processes: the stages of a pipelined MLP on two
// workers, against the unsplit MLP trained in this process.
#include "placer/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "distributed/distributed_session.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "runtime/step_trace.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;

// Two stages on two worker processes, four micro-batches, GPipe and 1F1B: every step's loss and
// the weights after them as in one process on the whole batch; each worker runs every
// micro-batch of its stage.
TEST(PipelineTest, StagesOnTwoWorkerProcessesTrainAsOneDevice) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  const std::vector<std::string> devices = {"/job:worker/task:0/device:CPU:0",
                                            "/job:worker/task:1/device:CPU:0"};
  for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    SCOPED_TRACE(ScheduleName(schedule));
    Mlp model("", "");
    PipelineOptions options;
    options.devices = devices;
    options.micro_batches = 4;
    options.schedule = schedule;
    options.loss = model.loss.node_name();
    options.costs.unknown_dim = 32;
    auto piped = Pipeline(model.root.graph(), options);
    ASSERT_TRUE(piped.ok()) << piped.status().ToString();
    SessionOptions session;
    session.placer.costs.unknown_dim = 32 / options.micro_batches;
    auto dist = DistributedSession::Create(*piped->graph, session, Cluster({&w0, &w1}));
    ASSERT_TRUE(dist.ok()) << dist.status().ToString();

    std::unique_ptr<Session> local = test_mlp::TrainsAsOnOneDevice(**dist, model);
    ASSERT_NE(local, nullptr);
    std::vector<std::string> weights;
    for (const Output& w : model.weights) weights.push_back(w.name());
    auto want = local->Run({}, weights);
    auto got = (*dist)->Run({}, weights);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
    for (size_t v = 0; v < weights.size(); ++v) {
      auto g = (*got)[v].ToVector<float>(), w = (*want)[v].ToVector<float>();
      ASSERT_EQ(g.size(), w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << weights[v] << "[" << i << "]";
      }
    }

    // A traced step: each worker ran its stage's forward of every micro-batch.
    StepTrace trace;
    auto traced =
        (*dist)->Run(MlpBatch(9), {model.loss.name()}, {model.step.name()}, {.trace = &trace});
    ASSERT_TRUE(traced.ok()) << traced.status().ToString();
    ASSERT_EQ(trace.devices.size(), 2u);
    for (const DeviceTrace& d : trace.devices) {
      std::set<std::string> micro_batches;
      for (const TracedNode& n : d.nodes) {
        if (n.name.rfind("microbatch", 0) == 0) micro_batches.insert(n.name.substr(0, 11));
      }
      EXPECT_EQ(micro_batches.size(), 4u) << d.device;
    }
  }
}

// Adam's state across processes: a three-layer MLP with Adam, two stages on two workers, 1F1B
// with four micro-batches, against the unsplit graph in this process (losses of three steps,
// then every variable and moment).
TEST(PipelineTest, AdamStagesOnTwoWorkerProcessesTrainAsOneDevice) {
  WorkerProcess w0("cpu:0"), w1("cpu:0");
  ASSERT_FALSE(w0.address().empty() || w1.address().empty());
  struct Model {
    Scope root = Scope::NewRootScope();
    std::string loss, step;
    std::vector<std::string> init, state;
    Model() {
      auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
      auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
      std::vector<Output> vars;
      Output h = x;
      const int64_t sizes[] = {784, 32, 32, 10};
      for (int l = 0; l < 3; ++l) {
        auto w = ops::InitializedVariable(root.WithOpName("w" + std::to_string(l)),
                                          Shape{sizes[l], sizes[l + 1]},
                                          ops::Initializer::GlorotUniform(l + 1));
        vars.push_back(w.var);
        init.push_back(w.init.node_name());
        state.push_back(w.var.node_name());
        h = ops::MatMul(root.WithOpName("dense" + std::to_string(l)), h, w.var);
        if (l < 2) h = ops::Tanh(root, h);
      }
      Output l = ops::ReduceMean(root.WithOpName("loss"),
                                 ops::SparseSoftmaxCrossEntropyWithLogits(root, h, y).loss);
      loss = l.node_name();
      ops::Adam adam({.learning_rate = 0.01});
      step = adam.Minimize(root, l, vars).name();
      init.insert(init.end(), adam.init_targets().begin(), adam.init_targets().end());
      for (int l = 0; l < 3; ++l) {
        for (const char* slot : {"/update/m", "/update/v"}) {
          state.push_back("w" + std::to_string(l) + slot);
        }
      }
    }
  };
  Model single, model;
  PipelineOptions options;
  options.devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  options.micro_batches = 4;
  options.loss = model.loss;
  options.costs.unknown_dim = 32;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  SessionOptions session;
  session.placer.costs.unknown_dim = 8;
  auto dist = DistributedSession::Create(*piped->graph, session, Cluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Session::Create(single.root);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  ASSERT_TRUE((*local)->Run({}, {}, single.init).ok());
  auto init = (*dist)->Run({}, {}, model.init);
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  for (int i = 0; i < 3; ++i) {
    auto feeds = MlpBatch(i);
    auto a = (*local)->Run(feeds, {single.loss}, {single.step});
    auto b = (*dist)->Run(feeds, {model.loss}, {model.step});
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    EXPECT_NEAR((*b)[0].data<float>()[0], (*a)[0].data<float>()[0], 1e-5) << "step " << i;
  }
  auto want = (*local)->Run({}, single.state);
  auto got = (*dist)->Run({}, model.state);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  for (size_t v = 0; v < model.state.size(); ++v) {
    auto g = (*got)[v].ToVector<float>(), w = (*want)[v].ToVector<float>();
    ASSERT_EQ(g.size(), w.size()) << model.state[v];
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << model.state[v] << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace dflow::distributed
