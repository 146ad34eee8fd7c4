// The pipeline rewrite: K stages on in-process devices and M micro-batches against the unsplit
// step on one device trained on the whole batch, step by step, with SGD and Adam, GPipe and 1F1B.
#include "placer/pipeline.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "rewrite/replicate.h"
#include "runtime/session.h"
#include "runtime/step_trace.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::Devices;
using testing::MessageHas;

// An MLP of `layers` dense layers on [batch, 8] inputs and 4 classes, widths 24; SGD or Adam.
struct DeepMlp {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> init, variables, layer_inputs;
  std::string loss, step, logits;
  DeepMlp(int layers, bool adam, int64_t width = 24) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    for (int l = 0; l < layers; ++l) {
      const int64_t in = l == 0 ? 8 : width, out = l + 1 == layers ? 4 : width;
      auto w = ops::InitializedVariable(root.WithOpName(fmt::format("w{}", l)), Shape{in, out},
                                        ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(root.WithOpName(fmt::format("b{}", l)), Shape{out},
                                        ops::Initializer::Constant(0.1));
      vars.insert(vars.end(), {w.var, b.var});
      init.insert(init.end(), {w.init.node_name(), b.init.node_name()});
      auto mm = ops::MatMul(root.WithOpName(fmt::format("dense{}", l)), h, w.var);
      layer_inputs.push_back(mm.node_name());
      h = ops::BiasAdd(root, mm, b.var);
      if (l + 1 < layers) h = ops::Tanh(root, h);
    }
    logits = ops::Identity(root.WithOpName("logits"), h).node_name();
    Output l = ops::ReduceMean(root.WithOpName("loss"),
                               ops::SparseSoftmaxCrossEntropyWithLogits(root, h, y).loss);
    loss = l.node_name();
    for (const Output& v : vars) variables.push_back(v.node_name());
    if (adam) {
      ops::Adam opt({.learning_rate = 0.01});
      step = opt.Minimize(root, l, vars).name();
      init.insert(init.end(), opt.init_targets().begin(), opt.init_targets().end());
    } else {
      step = ops::SGD({.learning_rate = 0.5}).Minimize(root, l, vars).name();
    }
  }
};

Session::Feeds Batch(int step, int rows) {
  std::mt19937 gen(step + 5);
  Tensor x(DType::kF32, Shape{rows, 8}), y(DType::kI32, Shape{rows});
  for (float& v : x.flat<float>()) v = std::uniform_real_distribution<float>(-1, 1)(gen);
  for (int i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 4);
  return {{"x", x}, {"labels", y}};
}

void ExpectNear(const Tensor& got, const Tensor& want, const std::string& what) {
  auto g = got.ToVector<float>(), w = want.ToVector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << what << "[" << i << "]";
  }
}

struct Case {
  int stages, micro_batches;
  PipelineSchedule schedule;
  bool adam;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.stages << " stages, " << c.micro_batches << " micro-batches, "
      << ScheduleName(c.schedule) << (c.adam ? ", Adam" : ", SGD");
}

class PipelineStepTest : public ::testing::TestWithParam<Case> {};

// The pipelined step is the unsplit step: the loss of every step and the variables after them.
TEST_P(PipelineStepTest, EqualsTheUnsplitStep) {
  const Case c = GetParam();
  DeepMlp single(4, c.adam), model(4, c.adam);
  PipelineOptions options;
  for (int s = 0; s < c.stages; ++s) options.devices.push_back(fmt::format("cpu:{}", s));
  options.micro_batches = c.micro_batches;
  options.schedule = c.schedule;
  options.loss = model.loss;
  options.gathered = {model.logits};
  options.costs.unknown_dim = 16;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  ASSERT_EQ(piped->plan.stages(), c.stages);
  // Every stage holds a forward node, and the stages follow the layers.
  for (int s = 0; s < c.stages; ++s) {
    EXPECT_LT(piped->plan.first_item[s], piped->plan.first_item[s + 1]);
  }
  EXPECT_EQ(piped->stage_of.at(model.layer_inputs.front()), 0);
  EXPECT_EQ(piped->stage_of.at(model.loss), c.stages - 1);
  EXPECT_GT(piped->plan.predicted_step_s, 0);

  auto one = Session::Create(single.root);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto many = Session::Create(*piped->graph, Devices(c.stages));
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
  auto init = (*many)->Run({}, {}, model.init);
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  Session::RunOptions run;
  run.timeout = std::chrono::milliseconds(20000);
  for (int step = 0; step < 3; ++step) {
    Session::Feeds feeds = Batch(step, 16);
    auto a = (*one)->Run(feeds, {single.loss, single.logits}, {single.step});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = (*many)->Run(feeds, {model.loss, model.logits}, {model.step}, run);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ExpectNear((*b)[0], (*a)[0], fmt::format("loss of step {}", step));
    ExpectNear((*b)[1], (*a)[1], fmt::format("logits of step {}", step));
  }
  auto want = (*one)->Run({}, single.variables);
  auto got = (*many)->Run({}, model.variables);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  for (size_t v = 0; v < model.variables.size(); ++v) {
    ExpectNear((*got)[v], (*want)[v], model.variables[v]);
  }
  // Inference on the trained variables: the forward-only copy of the logits needs no labels.
  ASSERT_EQ(piped->evaluation.at(model.logits), EvaluationName(model.logits));
  Session::Feeds images = {Batch(7, 16).front()};
  auto a = (*one)->Run(images, {single.logits});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = (*many)->Run(images, {EvaluationName(model.logits)}, {}, run);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectNear((*b)[0], (*a)[0], "evaluation logits");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int k : {2, 4}) {
    for (int m : {1, 2, 4, 8}) {
      for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
        for (bool adam : {false, true}) cases.push_back({k, m, schedule, adam});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, PipelineStepTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return fmt::format("K{}_M{}_{}_{}", c.stages, c.micro_batches,
                                              ScheduleName(c.schedule), c.adam ? "Adam" : "SGD");
                         });

// Each device runs its units in the schedule's order: a unit's nodes all start after the
// previous unit's have ended (from the step's trace).
void ExpectTheScheduleRan(PipelineSchedule schedule) {
  SCOPED_TRACE(ScheduleName(schedule));
  const int k = 2, m = 4;
  DeepMlp model(4, true);
  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = m;
  options.schedule = schedule;
  options.loss = model.loss;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  const std::set<std::string> forward(piped->items.begin(), piped->items.end());
  auto session = Session::Create(*piped->graph, Devices(k));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, model.init).ok());
  StepTrace trace;
  Session::RunOptions run;
  run.trace = &trace;
  run.timeout = std::chrono::milliseconds(20000);
  ASSERT_TRUE((*session)->Run(Batch(0, 16), {model.loss}, {model.step}, run).ok());
  ASSERT_EQ(trace.devices.size(), 2u);
  for (int s = 0; s < k; ++s) {
    // [first start, last end] of each unit (backward, micro-batch) on this device.
    std::map<std::pair<bool, int>, std::pair<int64_t, int64_t>> spans;
    for (const TracedNode& node : trace.devices[s].nodes) {
      int mb = -1;
      char rest[512];
      if (node.span.start_ns < 0 || node.op == "_Recv" || node.op == "_Send" ||
          std::sscanf(node.name.c_str(), "microbatch%d/%511s", &mb, rest) != 2) {
        continue;
      }
      const auto key = std::make_pair(!forward.count(rest), mb);
      auto [it, fresh] = spans.try_emplace(key, node.span.start_ns, node.span.end_ns);
      it->second.first = std::min(it->second.first, node.span.start_ns);
      it->second.second = std::max(it->second.second, node.span.end_ns);
    }
    const std::vector<PipelineUnit> order = StageOrder(schedule, s, k, m);
    ASSERT_EQ(spans.size(), order.size()) << "stage " << s;
    for (size_t u = 1; u < order.size(); ++u) {
      const auto& before = spans.at({order[u - 1].backward, order[u - 1].micro_batch});
      const auto& after = spans.at({order[u].backward, order[u].micro_batch});
      EXPECT_LE(before.second, after.first) << "stage " << s << " unit " << u;
    }
  }
}

TEST(PipelineTest, EachDeviceRunsItsUnitsInTheSchedulesOrder) {
  ExpectTheScheduleRan(PipelineSchedule::kGPipe);
  ExpectTheScheduleRan(PipelineSchedule::k1F1B);
}

TEST(PipelineTest, SplitPointsGivenStartTheStages) {
  DeepMlp model(4, false);
  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = 2;
  options.loss = model.loss;
  options.split_points = {model.layer_inputs[3]};
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  EXPECT_EQ(piped->stage_of.at(model.layer_inputs[2]), 0);
  EXPECT_EQ(piped->stage_of.at(model.layer_inputs[3]), 1);
  // Variables go with the stage that reads them, gradients with their forward node.
  EXPECT_EQ(piped->stage_of.at("w2"), 0);
  EXPECT_EQ(piped->stage_of.at("w3"), 1);
  EXPECT_EQ(piped->stage_of.at(fmt::format("gradients/{}_grad/MatMul", model.layer_inputs[3])), 1);
  EXPECT_EQ(piped->stage_of.at(fmt::format("gradients/{}_grad/MatMul", model.layer_inputs[2])), 0);
  const Graph& g = *piped->graph;
  auto copy = g.FindNode(MicroBatchName(model.layer_inputs[3], 1));
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(g.node(*copy).requested_device(), "/device:CPU:1");
  const std::string summary = piped->Summary({72.0 * (1 << 20), 72.0 * (1 << 20)});
  EXPECT_NE(summary.find("stage 1 on cpu:1: 'dense3'"), std::string::npos) << summary;
  EXPECT_NE(summary.find("of 72.00 MiB"), std::string::npos) << summary;
}

// Profiled node times of the pipelined graph become the single graph's, per micro-batch, and
// planning with them predicts from what was measured.
TEST(PipelineTest, ProfiledTimesPlanAgain) {
  DeepMlp model(4, true);
  MeasuredCosts fake;
  fake.seconds["CPU"] = {{"microbatch0/dense1", 2e-3}, {"microbatch1/dense1", 4e-3}, {"w1", 1e-6}};
  MeasuredCosts single = PipelineNodeCosts(fake, model.root.graph());
  const auto& cpu = single.seconds.at("CPU");
  EXPECT_DOUBLE_EQ(cpu.at("dense1"), 3e-3);  // the mean of its copies
  EXPECT_DOUBLE_EQ(cpu.at("w1"), 1e-6);      // kept once: its own
  EXPECT_DOUBLE_EQ(cpu.at("dense2"), 0);     // no time: folded elsewhere, or not run
  EXPECT_FALSE(cpu.count("x"));              // fed, never timed

  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = 4;
  options.loss = model.loss;
  options.costs.unknown_dim = 16;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  SessionOptions so = Devices(2);
  so.placer.costs.unknown_dim = 4;
  auto session = Session::Create(*piped->graph, so);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, model.init).ok());
  Session::RunOptions run;
  run.profile = true;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*session)->Run(Batch(step, 16), {model.loss}, {model.step}, run).ok());
  }
  const MeasuredCosts measured =
      PipelineNodeCosts((*session)->MeasuredNodeCosts(), model.root.graph());
  options.costs.measured = &measured;
  auto again = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->plan.predicted_step_s, 0);
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(again->plan.forward_s[s], 0) << "stage " << s;
    EXPECT_GT(again->plan.backward_s[s], 0) << "stage " << s;
  }
}

// Two data-parallel replicas of a two-stage pipeline (four devices; Replicate with each
// replica's stage devices): the step equals the unsplit step on the whole batch, and every
// device works.
TEST(PipelineTest, ReplicasOfAPipelineEqualTheUnsplitStep) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "Adam" : "SGD");
    DeepMlp single(4, adam), model(4, adam);
    PipelineOptions options;
    options.devices = {"cpu:0", "cpu:1"};
    options.micro_batches = 4;
    options.loss = model.loss;
    options.costs.unknown_dim = 8;
    auto piped = Pipeline(model.root.graph(), options);
    ASSERT_TRUE(piped.ok()) << piped.status().ToString();
    ops::ReplicateOptions replicas;
    replicas.devices = {"cpu:0", "cpu:2"};
    replicas.replica_devices = {{"cpu:0", "cpu:1"}, {"cpu:2", "cpu:3"}};
    replicas.averaged = {model.loss};
    auto both = ops::Replicate(*piped->graph, replicas);
    ASSERT_TRUE(both.ok()) << both.status().ToString();
    // Each stage's gradients are all-reduced between its two copies, none across stages.
    EXPECT_GE(both->buckets, 2);

    auto one = Session::Create(single.root);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    auto many = Session::Create(*both->graph, Devices(4));
    ASSERT_TRUE(many.ok()) << many.status().ToString();
    ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
    auto init = (*many)->Run({}, {}, model.init);
    ASSERT_TRUE(init.ok()) << init.status().ToString();
    Session::RunOptions run;
    run.timeout = std::chrono::milliseconds(20000);
    for (int step = 0; step < 3; ++step) {
      Session::Feeds feeds = Batch(step, 16);
      auto a = (*one)->Run(feeds, {single.loss}, {single.step});
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      auto b = (*many)->Run(feeds, {model.loss}, {model.step}, run);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ExpectNear((*b)[0], (*a)[0], fmt::format("loss of step {}", step));
    }
    auto want = (*one)->Run({}, single.variables);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> names;
      for (const auto& v : model.variables) names.push_back(ops::ReplicaName(v, r));
      auto got = (*many)->Run({}, names);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (size_t v = 0; v < names.size(); ++v) ExpectNear((*got)[v], (*want)[v], names[v]);
    }
    // Replica 1's second stage runs on cpu:3.
    const Graph& g = (*many)->graph();
    for (const char* name : {"replica1/microbatch0/dense3", "replica1/w3"}) {
      auto id = g.FindNode(name);
      ASSERT_TRUE(id) << name;
      EXPECT_EQ((*many)->device_set().DisplayName((*many)->placement().device_of[*id]), "cpu:3")
          << name;
    }
  }
  // Replica device lists that do not match are refused, naming the replica or the device.
  DeepMlp model(2, false);
  ops::ReplicateOptions bad;
  bad.devices = {"cpu:0", "cpu:2"};
  bad.replica_devices = {{"cpu:0", "cpu:1"}, {"cpu:2"}};
  auto uneven = ops::Replicate(model.root.graph(), bad);
  ASSERT_FALSE(uneven.ok());
  EXPECT_TRUE(MessageHas(uneven.status(), {"replica 1 has 1 devices"}));
  bad.replica_devices = {{"cpu:0", "cpu:1"}, {"cpu:2", "/device:CPU:1"}};
  auto twice = ops::Replicate(model.root.graph(), bad);
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(MessageHas(twice.status(), {"'/device:CPU:1' is given twice"}));
}

TEST(PipelineTest, BadRequestsNameWhatIsWrong) {
  DeepMlp model(2, false);
  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.loss = "nope";
  auto missing = Pipeline(model.root.graph(), options);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"'nope'"}));

  options.loss = model.loss;
  options.split_points = {"w0"};
  auto split = Pipeline(model.root.graph(), options);
  ASSERT_FALSE(split.ok());
  EXPECT_TRUE(MessageHas(split.status(), {"split point 'w0' is not a node"}));

  options.split_points = {};
  options.devices = {"cpu:0", "cpu:7"};
  DeviceSet set = DeviceSet::LocalCpus(2).value();
  options.device_set = &set;
  auto device = Pipeline(model.root.graph(), options);
  ASSERT_FALSE(device.ok());
  EXPECT_TRUE(MessageHas(device.status(), {"device 'cpu:7'"}));

  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = 0;
  EXPECT_FALSE(Pipeline(model.root.graph(), options).ok());

  // A loss of the variables alone has no batch to split.
  Scope root = Scope::NewRootScope();
  auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{4}, ops::Initializer::Zeros());
  auto l = ops::ReduceMean(root.WithOpName("l"), ops::Mul(root, w.var, w.var));
  ops::SGD({}).Minimize(root, l, {w.var});
  options.micro_batches = 2;
  options.loss = "l";
  auto nobatch = Pipeline(root.graph(), options);
  ASSERT_FALSE(nobatch.ok());
  EXPECT_TRUE(MessageHas(nobatch.status(), {"'l' does not depend on a batch"}));
}

TEST(PipelineTest, ABatchThatDoesNotDivideFailsNamingTheSplit) {
  DeepMlp model(2, false);
  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = 4;
  options.loss = model.loss;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  auto session = Session::Create(*piped->graph, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, model.init).ok());
  Session::RunOptions run;
  run.timeout = std::chrono::milliseconds(20000);
  auto out = (*session)->Run(Batch(0, 10), {model.loss}, {model.step}, run);
  ASSERT_FALSE(out.ok());
  // Both batch placeholders split (x on the first stage, labels on the last); whichever fails
  // first is the step's error.
  EXPECT_TRUE(MessageHas(out.status(), {"/microbatch_split", "does not split into 4"}));
}

// A model that needs more than one device's memory trains within each device's limit.
TEST(PipelineTest, EachStageStaysWithinItsDevicesMemory) {
  DeepMlp model(4, true, 512);
  const double limit = 8.0 * (1 << 20);
  DeviceSpec spec;
  spec.memory_bytes = limit;
  DeviceSet set = DeviceSet::LocalCpus(2, spec).value();
  PipelineOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.micro_batches = 4;
  options.loss = model.loss;
  options.device_set = &set;
  options.costs.unknown_dim = 64;
  auto piped = Pipeline(model.root.graph(), options);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  for (int s = 0; s < 2; ++s) EXPECT_LE(piped->plan.peak_bytes[s], limit) << "stage " << s;
  SessionOptions so = Devices(2);
  so.device_memory_bytes = limit;
  auto session = Session::Create(*piped->graph, so);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, model.init).ok());
  for (int step = 0; step < 2; ++step) {
    auto out = (*session)->Run(Batch(step, 64), {model.loss}, {model.step});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
  }
  const StepStats stats = (*session)->last_step_stats();
  ASSERT_EQ(stats.device_peak_bytes.size(), 2u);
  for (int s = 0; s < 2; ++s) EXPECT_LE(stats.device_peak_bytes[s], limit) << "device " << s;
  // On one device of that limit it does not fit: the variables and Adam's state alone take
  // 3 x 4 x (512 x 512 x 2 + ...) bytes.
  options.devices = {"cpu:0"};
  DeviceSet one = DeviceSet::LocalCpus(1, spec).value();
  options.device_set = &one;
  auto refused = Pipeline(model.root.graph(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(MessageHas(refused.status(), {"stage 0 on cpu:0"}));
}

}  // namespace
}  // namespace dflow
