// Pipeline parallelism across dflow-worker processes: the stages of a pipelined MLP on two
// workers, against the unsplit MLP trained in this process.
#include "placer/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "distributed/distributed_session.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_fixture.h"
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

}  // namespace
}  // namespace dflow::distributed
