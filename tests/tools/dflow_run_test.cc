// dflow-run end to end: the binary runs a saved graph, and what it writes equals what the C++
// API computes; every exit code and error form.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "placer/cost_model.h"
#include "runtime/session.h"
#include "serialization/checkpoint_file.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "test_util.h"
#include "tools/run_tool.h"

namespace dflow {
namespace {

using testing::Ran;
using testing::Temp;

Ran RunTool(const std::string& args) { return testing::RunBinary(DFLOW_RUN_BINARY, args); }
Ran RunTool(const std::vector<std::string>& args) {
  return testing::RunBinary(DFLOW_RUN_BINARY, args);
}

// y = tanh(x @ w + 1), w a variable with an initializer; "bump" adds 1 to w.
struct Saved {
  Scope root = Scope::NewRootScope();
  std::string path = Temp("tool_graph.dfg");
  std::string init;
  Saved() {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3});
    auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{3, 2},
                                      ops::Initializer::GlorotUniform(5));
    init = w.init.node_name();
    ops::Assign(root.WithOpName("bump"), w.var, ops::Add(root, w.var, ops::Const(root, 1.0f)));
    ops::Tanh(root.WithOpName("y"),
              ops::Add(root, ops::MatMul(root, x, w.var), ops::Const(root, 1.0f)));
    Graph g = root.graph();
    EXPECT_TRUE(g.Validate().ok());
    EXPECT_TRUE(serialization::SaveGraph(g, path).ok());
  }
};

TEST(DflowRunTest, FetchedNpyEqualsTheCppApi) {
  Saved saved;
  Tensor x = Tensor::FromVector(testing::RandomFloats(12, 4), Shape{4, 3});
  ASSERT_TRUE(serialization::WriteNpy(x, Temp("x.npy")).ok());
  // The reference: the same graph through the C++ API.
  auto session = Session::Create(saved.root);
  ASSERT_TRUE(session.ok());
  const std::string& init = saved.init;
  ASSERT_TRUE((*session)->Run({}, {}, {init}).ok());
  auto expected = (*session)->Run({{"x", x}}, {"y"});
  ASSERT_TRUE(expected.ok());

  for (const char* devices : {"", " --devices cpu:0,cpu:1"}) {
    // Initialise, save a checkpoint; then restore it and fetch y to a file.
    Ran a = RunTool(saved.path + " --target " + init + " --save " + Temp("w.dfckpt") + devices);
    ASSERT_EQ(a.code, 0) << a.output;
    Ran b = RunTool(saved.path + " --restore " + Temp("w.dfckpt") + " --feed x=" + Temp("x.npy") +
                    " --fetch y=" + Temp("y.npy") + devices);
    ASSERT_EQ(b.code, 0) << b.output;
    auto y = serialization::ReadNpy(Temp("y.npy"));
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->shape(), (Shape{4, 2}));
    EXPECT_EQ(y->ToVector<float>(), expected->at(0).ToVector<float>()) << devices;
  }
  // Printed fetches, and repeated steps with their statistics.
  Ran p = RunTool(saved.path + " --restore " + Temp("w.dfckpt") + " --feed x=" + Temp("x.npy") +
                  " --fetch y --steps 3");
  ASSERT_EQ(p.code, 0) << p.output;
  EXPECT_NE(p.output.find("y: f32[4,2] ["), std::string::npos) << p.output;
  EXPECT_NE(p.output.find(fmt::format("{}", expected->at(0).data<float>()[0])), std::string::npos)
      << p.output;
  EXPECT_NE(p.output.find("3 steps: median"), std::string::npos) << p.output;
  // One device: nothing placed, so no prediction (it used to print "predicted 0.000 ms").
  EXPECT_NE(p.output.find("(one device, no placement to predict)"), std::string::npos) << p.output;
  Ran two = RunTool(saved.path + " --restore " + Temp("w.dfckpt") + " --feed x=" + Temp("x.npy") +
                    " --fetch y --steps 2 --devices cpu:0,cpu:1 --fixed-costs");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("(placer predicted "), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("predicted 0.000 ms"), std::string::npos) << two.output;

  // --save-costs: each node's measured seconds, which the next run's placer loads.
  const std::string costs = Temp("costs.json");
  Ran c = RunTool(saved.path + " --restore " + Temp("w.dfckpt") + " --feed x=" + Temp("x.npy") +
                  " --fetch y --steps 3 --devices cpu:0,cpu:1 --save-costs " + costs);
  ASSERT_EQ(c.code, 0) << c.output;
  auto measured = MeasuredCosts::Load(costs);
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  ASSERT_TRUE(measured->seconds.count("CPU")) << c.output;
  const auto& cpu = measured->seconds.at("CPU");
  ASSERT_TRUE(cpu.count("y")) << c.output;  // the fetched node ran in every step
  double total = 0;
  for (const auto& [node, seconds] : cpu) {
    // A node too cheap to time (a Const) may read 0.
    EXPECT_GE(seconds, 0) << node;
    EXPECT_LT(seconds, 1) << node;
    total += seconds;
  }
  EXPECT_GT(total, 0);
  Ran d = RunTool(saved.path + " --restore " + Temp("w.dfckpt") + " --feed x=" + Temp("x.npy") +
                  " --fetch y --devices cpu:0,cpu:1 --cost-file " + costs);
  EXPECT_EQ(d.code, 0) << d.output;
}

// --trace: a track per device, every node's slice in every step, and an arrow per Send/Recv.
TEST(DflowRunTest, TraceHasATrackPerDeviceAndSendRecvFlows) {
  Scope root = Scope::NewRootScope();
  Scope d0 = root.WithDevice("cpu:0"), d1 = root.WithDevice("cpu:1");
  auto x = ops::Placeholder(d0.WithOpName("x"), DType::kF32, Shape{8, 8});
  auto a = ops::MatMul(d0.WithOpName("a"), x, x);
  auto t = ops::Tanh(d1.WithOpName("t"), a);
  ops::Neg(d0.WithOpName("y"), t);
  const std::string graph = Temp("trace_graph.dfg"), trace = Temp("trace.json");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_TRUE(serialization::WriteNpy(Tensor::FromVector(testing::RandomFloats(64, 9), Shape{8, 8}),
                                      Temp("x8.npy"))
                  .ok());
  // No --devices: the graph's requested devices are used, and said.
  Ran r = RunTool(graph + " --feed x=" + Temp("x8.npy") + " --fetch y --steps 2 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("devices (cpu:0 up to the highest a node requests; --devices "
                          "overrides): cpu:0,cpu:1\n"),
            std::string::npos)
      << r.output;
  auto text = serialization::ReadFile(trace);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  nlohmann::json events = nlohmann::json::parse(*text).at("traceEvents");
  std::map<int, std::string> processes;
  std::map<std::string, int> slices;  // node -> slices
  std::map<std::string, int> phases;
  for (const auto& e : events) {
    phases[e.at("ph")]++;
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      processes[e.at("pid")] = e.at("args").at("name");
    }
    if (e.at("ph") == "X") slices[e.at("name")]++;
  }
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0], "/job:localhost/task:0/device:CPU:0");
  EXPECT_EQ(processes[1], "/job:localhost/task:0/device:CPU:1");
  for (const char* node : {"x", "a", "t", "y"}) EXPECT_EQ(slices[node], 2) << node;
  // a goes to cpu:1 and t comes back: two pairs per step.
  EXPECT_EQ(phases["s"], 4);
  EXPECT_EQ(phases["f"], 4);

  // An unwritable trace path fails before any step runs, naming the flag and the file.
  Ran bad = RunTool(graph + " --devices cpu:0,cpu:1 --feed x=" + Temp("x8.npy") +
                    " --fetch y --trace /nonexistent_dflow_dir/t.json");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("error: "), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("--trace: "), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("/nonexistent_dflow_dir/t.json"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("y: f32"), std::string::npos) << bad.output;
}

TEST(DflowRunTest, ExitCodesAndErrorLines) {
  Saved saved;
  struct Case {
    std::string args;
    int code;
    std::vector<std::string> words;
  };
  std::vector<Case> cases = {
      {"", 2, {"error: InvalidArgument:", "graph"}},
      {saved.path + " --fetch y --placer fancy", 2, {"error: InvalidArgument:", "fancy"}},
      {saved.path + " --feed x --fetch y", 2, {"error: InvalidArgument: --feed 'x'", "NAME=FILE"}},
      {saved.path, 2, {"error: InvalidArgument: nothing to run"}},
      {Temp("missing.dfg") + " --fetch y", 1, {"error: NotFound:", "missing.dfg"}},
      {saved.path + " --fetch y", 1, {"error: InvalidArgument:", "'x'"}},
      {saved.path + " --feed x=" + Temp("absent.npy") + " --fetch y",
       1,
       {"error: NotFound: --feed x:", "absent.npy"}},
      {saved.path + " --fetch nosuch", 1, {"error: NotFound:", "nosuch"}},
      {saved.path + " --restore " + Temp("absent.dfckpt") + " --fetch y",
       1,
       {"error: NotFound:", "absent.dfckpt"}},
      // Issue 31: ignored on one device before.
      {saved.path + " --target " + saved.init + " --cost-file " + Temp("absent_costs.json"),
       1,
       {"error: NotFound:", "absent_costs.json"}},
  };
  for (const Case& c : cases) {
    Ran r = RunTool(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.output;
    for (const auto& w : c.words) EXPECT_NE(r.output.find(w), std::string::npos) << r.output;
    // One line of error.
    if (r.code != 0) {
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
  }
  Ran help = RunTool("--help");
  EXPECT_EQ(help.code, 0);
  for (const char* flag : {"--feed", "--fetch", "--target", "--devices", "--placer", "--cost-file",
                           "--steps", "--restore", "--save", "--trace", "--log-placement",
                           "--fixed-costs", "--memory-limit", "--assume-batch"}) {
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
  }
}

// Issue 11: the default device list sorted names as text (cpu:10 before cpu:2) and refused
// three spellings of one device. Now it is cpu:0 up to the highest CPU a node requests, each
// once.
TEST(DflowRunTest, DefaultDevicesAreCanonicalNumericAndFilledUpToTheHighest) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{2});
  auto a = ops::Neg(root.WithOpName("a").WithDevice("cpu:1"), x);
  auto b = ops::Neg(root.WithOpName("b").WithDevice("CPU:1"), a);
  auto c = ops::Neg(root.WithOpName("c").WithDevice("/job:localhost/task:0/device:CPU:1"), b);
  auto d = ops::Neg(root.WithOpName("d").WithDevice("cpu:10"), c);
  ops::Neg(root.WithOpName("e").WithDevice("cpu:2"), d);
  const std::string graph = Temp("spellings.dfg");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_TRUE(
      serialization::WriteNpy(Tensor::FromVector<float>({1, -2}, Shape{2}), Temp("x2.npy")).ok());
  Ran r = RunTool(graph + " --feed x=" + Temp("x2.npy") + " --fetch e --log-placement");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("devices (cpu:0 up to the highest a node requests; --devices "
                          "overrides): cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7,cpu:8,"
                          "cpu:9,cpu:10\n"),
            std::string::npos)
      << r.output;
  for (const char* line : {"a (Neg) -> cpu:1", "b (Neg) -> cpu:1", "c (Neg) -> cpu:1",
                           "d (Neg) -> cpu:10", "e (Neg) -> cpu:2"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("e: f32[2] [-1, 2]"), std::string::npos) << r.output;

  // A graph pinned to cpu:3 alone runs on cpu:0 .. cpu:3.
  Scope only3 = Scope::NewRootScope();
  auto y = ops::Placeholder(only3.WithOpName("x"), DType::kF32, Shape{2});
  ops::Neg(only3.WithOpName("n").WithDevice("cpu:3"), y);
  ASSERT_TRUE(serialization::SaveGraph(only3.graph(), Temp("only3.dfg")).ok());
  Ran three = RunTool(Temp("only3.dfg") + " --feed x=" + Temp("x2.npy") + " --fetch n " +
                      "--log-placement");
  ASSERT_EQ(three.code, 0) << three.output;
  EXPECT_NE(three.output.find("overrides): cpu:0,cpu:1,cpu:2,cpu:3\n"), std::string::npos)
      << three.output;
  EXPECT_NE(three.output.find("n (Neg) -> cpu:3"), std::string::npos) << three.output;

  // --devices in any order and spelling; the same device twice is a usage error naming it.
  Ran spelled = RunTool(Temp("only3.dfg") + " --feed x=" + Temp("x2.npy") +
                        " --fetch n --devices CPU:3,cpu:1,/job:localhost/task:0/device:CPU:0,"
                        "cpu:2 --log-placement");
  EXPECT_EQ(spelled.code, 0) << spelled.output;
  EXPECT_NE(spelled.output.find("n (Neg) -> cpu:3"), std::string::npos) << spelled.output;
  for (const auto& [devices, words] : std::vector<std::pair<std::string, std::string>>{
           {"cpu:0,cpu:0", "'cpu:0' and 'cpu:0' are the same device, cpu:0"},
           {"cpu:0,CPU:1,cpu:1", "'CPU:1' and 'cpu:1' are the same device, cpu:1"},
           {"cpu:0,cpu:2", "cpu:1 is missing"},
           // No GPU here, or fewer than 8: either way refused naming it.
           {"cpu:0,gpu:7", "'gpu:7': "}}) {
    Ran bad = RunTool(graph + " --fetch e --devices " + devices);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_EQ(bad.output.find("error: InvalidArgument: --devices '" + devices + "': "), 0u)
        << bad.output;
    EXPECT_NE(bad.output.find(words), std::string::npos) << bad.output;
    EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  }
}

// A saved graph with two 1 MiB variables, each summed: one device of 1.5 MiB holds one of them.
std::string TwoVariablesGraph() {
  Scope root = Scope::NewRootScope();
  std::vector<Output> inits, sums;
  for (const char* name : {"v0", "v1"}) {
    auto v =
        ops::InitializedVariable(root.WithOpName(name), Shape{512, 512}, ops::Initializer::Zeros());
    inits.push_back(v.init);
    sums.push_back(ops::ReduceSum(root.WithOpName(std::string(name) + "_sum"), v.var));
  }
  ops::Add(root.WithOpName("total"), sums[0], sums[1]);
  ops::NoOp(root.WithOpName("init").WithControlDependencies(inits));
  std::string path = Temp("two_variables.dfg");
  EXPECT_TRUE(serialization::SaveGraph(root.graph(), path).ok());
  return path;
}

// --memory-limit is each device's memory for the placer; bad sizes are usage errors naming the
// flag and the text.
TEST(DflowRunTest, MemoryLimitSplitsVariablesAndBadSizesAreUsageErrors) {
  std::string graph = TwoVariablesGraph();
  Ran split = RunTool(graph +
                      " --devices cpu:0,cpu:1 --memory-limit 1.5MiB --fixed-costs "
                      "--target init --log-placement");
  ASSERT_EQ(split.code, 0) << split.output;
  // Summary lines "cpu:0: N nodes, variables and constants 1.00 MiB, peak ...", one per device.
  size_t first = split.output.find("variables and constants 1.00 MiB");
  ASSERT_NE(first, std::string::npos) << split.output;
  EXPECT_NE(split.output.find("variables and constants 1.00 MiB", first + 1), std::string::npos)
      << split.output;
  auto device_of = [&](const std::string& node) {
    size_t at = split.output.find(node + " (Variable) -> ");
    if (at == std::string::npos) return std::string("?");
    at = split.output.find("-> ", at) + 3;
    return split.output.substr(at, split.output.find('\n', at) - at);
  };
  EXPECT_EQ(std::set<std::string>({device_of("v0"), device_of("v1")}),
            std::set<std::string>({"cpu:0", "cpu:1"}))
      << split.output;
  // Without --devices the limit still holds: one device of 1.5 MiB cannot take 2 MiB.
  Ran one = RunTool(graph + " --memory-limit 1.5MiB --target init");
  EXPECT_EQ(one.code, 1) << one.output;
  EXPECT_NE(one.output.find("error: ResourceExhausted: no device has room for the 1048576 bytes"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("cpu:0: 1048576 of 1572864 bytes in use"), std::string::npos)
      << one.output;
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"12XB", "unknown unit 'XB'; units are B, KB, MB, GB, TB, KiB, MiB, GiB and TiB"},
           {"-5MiB", "a size has no sign"},
           {"0", "it must be at least one byte"}}) {
    Ran bad = RunTool({graph, "--target", "init", "--memory-limit=" + text});
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_EQ(bad.output, "error: InvalidArgument: --memory-limit: '" + text + "' is not a size: " +
                              why + " (expected e.g. 512MiB, 1.5GB or 1048576)\n");
  }
}

// --assume-batch: the placer's estimate of activations uses it.
// --micro-batches: a training graph pipelined over two stages trains as unsplit (the loss of
// the last step and the variables saved after three steps, against the run without it); the
// stages and the predicted step are printed; a pipeline flag alone, or no batch fed, is refused.
TEST(DflowRunTest, MicroBatchesPipelineATrainingGraph) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  std::vector<Output> vars;
  std::vector<Output> inits;
  Output h = x;
  for (int l = 0; l < 3; ++l) {
    auto w = ops::InitializedVariable(root.WithOpName("w" + std::to_string(l)),
                                      Shape{l == 0 ? 8 : 16, l == 2 ? 4 : 16},
                                      ops::Initializer::GlorotUniform(l + 1));
    vars.push_back(w.var);
    inits.push_back(w.init);
    h = ops::MatMul(root.WithOpName("dense" + std::to_string(l)), h, w.var);
    if (l < 2) h = ops::Tanh(root, h);
  }
  ops::Identity(root.WithOpName("logits"), h);
  auto loss = ops::ReduceMean(root.WithOpName("loss"),
                              ops::SparseSoftmaxCrossEntropyWithLogits(root, h, labels).loss);
  const std::string step = ops::SGD({.learning_rate = 0.5}).Minimize(root, loss, vars).name();
  ops::NoOp(root.WithOpName("init").WithControlDependencies(inits));
  const std::string graph = Temp("pipelined_mlp.dfg");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  Tensor xs(DType::kF32, Shape{16, 8}), ys(DType::kI32, Shape{16});
  for (int64_t i = 0; i < xs.num_elements(); ++i) xs.data<float>()[i] = ((i * 7) % 13) / 6.5f - 1;
  for (int i = 0; i < 16; ++i) ys.data<int32_t>()[i] = (i * 3) % 4;
  ASSERT_TRUE(serialization::WriteNpy(xs, Temp("pp_x.npy")).ok());
  ASSERT_TRUE(serialization::WriteNpy(ys, Temp("pp_y.npy")).ok());
  Ran init = RunTool(graph + " --target init --save " + Temp("pp_init.dfckpt"));
  ASSERT_EQ(init.code, 0) << init.output;
  const std::string train = graph + " --restore " + Temp("pp_init.dfckpt") +
                            " --feed x=" + Temp("pp_x.npy") + " --feed labels=" + Temp("pp_y.npy") +
                            " --target " + step + " --steps 3";
  Ran plain = RunTool(train + " --fetch loss=" + Temp("pp_loss_plain.npy") + " --save " +
                      Temp("pp_plain.dfckpt"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  Ran piped = RunTool(train + " --stages 2 --micro-batches 4 --gather logits --fetch loss=" +
                      Temp("pp_loss_piped.npy") + " --fetch logits=" + Temp("pp_logits.npy") +
                      " --save " + Temp("pp_piped.dfckpt"));
  ASSERT_EQ(piped.code, 0) << piped.output;
  EXPECT_NE(piped.output.find("pipeline: 2 stages x 4 micro-batches (1f1b), predicted step"),
            std::string::npos)
      << piped.output;
  EXPECT_NE(piped.output.find("stage 1 on cpu:1"), std::string::npos) << piped.output;
  auto a = serialization::ReadNpy(Temp("pp_loss_plain.npy"));
  auto b = serialization::ReadNpy(Temp("pp_loss_piped.npy"));
  auto logits = serialization::ReadNpy(Temp("pp_logits.npy"));
  ASSERT_TRUE(a.ok() && b.ok() && logits.ok());
  EXPECT_NEAR(b->data<float>()[0], a->data<float>()[0], 1e-5);
  EXPECT_EQ(logits->shape(), (Shape{16, 4}));
  auto want = serialization::LoadCheckpoint(Temp("pp_plain.dfckpt"));
  auto got = serialization::LoadCheckpoint(Temp("pp_piped.dfckpt"));
  ASSERT_TRUE(want.ok() && got.ok());
  for (const char* v : {"w0", "w1", "w2"}) {
    auto w = want->at(v).ToVector<float>(), g = got->at(v).ToVector<float>();
    ASSERT_EQ(w.size(), g.size()) << v;
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-5) << v << "[" << i << "]";
  }

  Ran alone = RunTool(train + " --stages 2");
  EXPECT_EQ(alone.code, 2) << alone.output;
  EXPECT_NE(alone.output.find("error: InvalidArgument: --stages goes with --micro-batches"),
            std::string::npos)
      << alone.output;
  Ran odd = RunTool(train + " --stages 2 --micro-batches 3");
  EXPECT_EQ(odd.code, 1) << odd.output;
  EXPECT_NE(odd.output.find("the batch of 16 examples does not divide into 3 micro-batches"),
            std::string::npos)
      << odd.output;
  Ran nobatch = RunTool(graph + " --target init --stages 2 --micro-batches 2");
  EXPECT_EQ(nobatch.code, 1) << nobatch.output;
  EXPECT_NE(nobatch.output.find("--micro-batches: no batch to split"), std::string::npos)
      << nobatch.output;
}

TEST(DflowRunTest, AssumedBatchSizesTheActivations) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1024});
  auto w =
      ops::InitializedVariable(root.WithOpName("w"), Shape{1024, 1024}, ops::Initializer::Zeros());
  ops::MatMul(root.WithOpName("y"), x, w.var);
  std::string graph = Temp("batch.dfg");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  // w is 4 MiB; a batch of 1024 makes x and y 4 MiB each.
  Ran small =
      RunTool(graph + " --memory-limit 10MiB --assume-batch 8 --target " + w.init.node_name());
  EXPECT_EQ(small.code, 0) << small.output;
  EXPECT_NE(small.output.find("cpu:0: 5 nodes, variables and constants 4.00 MiB, peak 4.06 MiB"),
            std::string::npos)
      << small.output;
  Ran large =
      RunTool(graph + " --memory-limit 10MiB --assume-batch 1024 --target " + w.init.node_name());
  EXPECT_EQ(large.code, 1) << large.output;
  EXPECT_NE(large.output.find("error: ResourceExhausted: no placement found whose variables, "
                              "constants and peak activations fit"),
            std::string::npos)
      << large.output;
  Ran zero = RunTool(graph + " --assume-batch 0 --target " + w.init.node_name());
  EXPECT_EQ(zero.code, 2) << zero.output;
  EXPECT_NE(zero.output.find("error: InvalidArgument: --assume-batch"), std::string::npos)
      << zero.output;
}

// Issue 11: NumPy writes integer labels as int64. They feed an int32 placeholder when every value
// fits; otherwise the error names the feed, the file and the value's index.
TEST(DflowRunTest, Int64LabelsFeedAnInt32PlaceholderWhenTheyFit) {
  Scope root = Scope::NewRootScope();
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  ops::Identity(root.WithOpName("seen"), labels);
  ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1});
  std::string graph = Temp("labels.dfg");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_TRUE(serialization::WriteNpy(Tensor::FromVector<int64_t>({3, 0, 9, -2}, Shape{4}),
                                      Temp("labels64.npy"))
                  .ok());
  Ran ok = RunTool(graph + " --feed labels=" + Temp("labels64.npy") + " --fetch seen");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_EQ(ok.output, "seen: i32[4] [3, 0, 9, -2]\n");

  ASSERT_TRUE(serialization::WriteNpy(Tensor::FromVector<int64_t>({1, 2, 4294967296LL}, Shape{3}),
                                      Temp("big.npy"))
                  .ok());
  Ran big = RunTool(graph + " --feed labels=" + Temp("big.npy") + " --fetch seen");
  EXPECT_EQ(big.code, 1) << big.output;
  EXPECT_EQ(big.output, "error: InvalidArgument: --feed labels: " + Temp("big.npy") +
                            " holds int64 values for placeholder 'labels' (i32); the value "
                            "4294967296 at index [2] does not fit int32\n");

  ASSERT_TRUE(
      serialization::WriteNpy(Tensor::FromVector<double>({0.5}, Shape{1}), Temp("x64.npy")).ok());
  Ran f64 = RunTool(graph + " --feed x=" + Temp("x64.npy") + " --fetch x");
  EXPECT_EQ(f64.code, 1) << f64.output;
  EXPECT_EQ(f64.output, "error: InvalidArgument: --feed x: " + Temp("x64.npy") +
                            " holds f64 values, placeholder 'x' is f32: save the array as float32 "
                            "('<f4') (dflow-run converts int64 to int32 only)\n");
}

// dflow-run started in the background, its stdout and stderr going to a file; killed and reaped
// when the test ends however it ends.
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<std::string> all = {DFLOW_RUN_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, DFLOW_RUN_BINARY, &actions, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Background() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  void Signal(int sig) { ::kill(pid_, sig); }
  // Its exit code once it exits, or nullopt after `limit` (then it is killed).
  std::optional<int> Wait(std::chrono::seconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }
  std::string Output() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

bool WaitForFile(const std::string& path, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

float Checkpointed(const std::string& path, const std::string& variable, int index) {
  auto vars = serialization::LoadCheckpoint(path);
  EXPECT_TRUE(vars.ok()) << vars.status().ToString();
  if (!vars.ok() || !vars->count(variable)) return NAN;
  return vars->at(variable).data<float>()[index];
}

// Issue 31: a missing output folder was found after all the steps (the trained weights lost, the
// error Internal naming a temporary file). Each output path is checked before the first step.
TEST(DflowRunTest, OutputPathsAreCheckedBeforeTheFirstStep) {
  Saved saved;
  const std::string missing = Temp("no_such_folder");
  std::filesystem::remove_all(missing);
  ASSERT_EQ(RunTool(saved.path + " --target " + saved.init + " --save " + Temp("w0.dfckpt")).code,
            0);
  const std::string run = saved.path + " --restore " + Temp("w0.dfckpt") + " --target bump";
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {" --save " + missing + "/w.dfckpt", "--save: "},
           {" --trace " + missing + "/t.json", "--trace: "},
           {" --save-costs " + missing + "/c.json", "--save-costs: "},
           {" --fetch w=" + missing + "/w.npy", "--fetch w: "}}) {
    Ran r = RunTool(run + " --steps 1000" + args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("error: NotFound: " + flag), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("'" + missing + "' does not exist"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("steps"), std::string::npos) << "a step ran:\n" << r.output;
    EXPECT_EQ(r.output.find(".tmp"), std::string::npos) << r.output;
  }
  Ran folder = RunTool(run + " --save " + ::testing::TempDir());
  EXPECT_EQ(folder.code, 1) << folder.output;
  EXPECT_NE(folder.output.find("is a folder"), std::string::npos) << folder.output;
}

// --checkpoint-every N saves every N steps and at the end; "bump" adds 1 to w per step, so each
// checkpoint holds w0 + the steps done.
TEST(DflowRunTest, CheckpointEverySavesAsTheStepsGo) {
  Saved saved;
  const std::string w0 = Temp("every_w0.dfckpt"), out = Temp("every.dfckpt");
  ASSERT_EQ(RunTool(saved.path + " --target " + saved.init + " --save " + w0).code, 0);
  Ran r = RunTool(saved.path + " --restore " + w0 +
                  " --target bump --steps 7 --checkpoint-every 3 " + "--save " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint after step 3: " + out), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoint after step 6: " + out), std::string::npos) << r.output;
  EXPECT_EQ(Checkpointed(out, "w", 0), Checkpointed(w0, "w", 0) + 7.0f);

  Ran unsaved = RunTool(saved.path + " --restore " + w0 + " --target bump --checkpoint-every 3");
  EXPECT_EQ(unsaved.code, 2) << unsaved.output;
  EXPECT_NE(unsaved.output.find("--checkpoint-every needs --save"), std::string::npos)
      << unsaved.output;
}

// Issue 31: SIGINT during --steps N exited at once with nothing written. Now the step in flight
// finishes, then the checkpoint, the fetches, the statistics and the trace of the steps done are
// written, and the exit says so with 130 (SIGTERM: 143).
TEST(DflowRunTest, AnInterruptedRunWritesWhatWasAsked) {
  Saved saved;
  const std::string w0 = Temp("int_w0.dfckpt");
  ASSERT_EQ(RunTool(saved.path + " --target " + saved.init + " --save " + w0).code, 0);
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string out = Temp("int.dfckpt"), trace = Temp("int_trace.json"),
                      fetched = Temp("int_w.npy");
    for (const auto& f : {out, trace, fetched}) std::filesystem::remove(f);
    Background run(
        {saved.path, "--restore", w0, "--target", "bump", "--fetch", "w=" + fetched, "--steps",
         "100000000", "--checkpoint-every", "20", "--save", out, "--trace", trace},
        Temp("int.log"));
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(WaitForFile(out, std::chrono::seconds(60))) << run.Output();
    run.Signal(sig);
    std::optional<int> code = run.Wait(std::chrono::seconds(60));
    ASSERT_TRUE(code.has_value()) << "still running after the signal:\n" << run.Output();
    const std::string output = run.Output();
    EXPECT_EQ(*code, 128 + sig) << output;
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    size_t at = output.find("error: Cancelled: interrupted by " + name + " after ");
    ASSERT_NE(at, std::string::npos) << output;
    const int done = std::stoi(output.substr(output.find(" after ", at) + 7));
    EXPECT_GE(done, 20);
    EXPECT_NE(output.find(std::to_string(done) +
                          " of 100000000 steps; wrote the fetches of the "
                          "last step, checkpoint " +
                          out + ", trace " + trace),
              std::string::npos)
        << output;
    // The statistics of the steps done.
    EXPECT_NE(output.find(std::to_string(done) + " steps: median"), std::string::npos) << output;
    // The checkpoint holds w after exactly `done` bumps.
    float expected = Checkpointed(w0, "w", 0);
    for (int i = 0; i < done; ++i) expected += 1.0f;
    EXPECT_EQ(Checkpointed(out, "w", 0), expected);
    auto w = serialization::ReadNpy(fetched);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(w->shape(), (Shape{3, 2}));
    // A trace with every step done.
    std::ifstream in(trace);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(json.is_discarded()) << "the trace is not JSON";
    EXPECT_FALSE(json["traceEvents"].empty());
  }
}

// A second signal ends the run at once, even in the middle of a long step, writing nothing more.
TEST(DflowRunTest, ASecondSignalEndsItAtOnce) {
  // A step of about a second here (0.15 s for twenty products of 1200x1200): forty of 1600x1600.
  Scope root = Scope::NewRootScope();
  auto v = ops::InitializedVariable(root.WithOpName("v"), Shape{1600, 1600},
                                    ops::Initializer::Uniform(-0.03, 0.03, 3));
  Output h = v.var;
  for (int i = 0; i < 40; ++i) h = ops::MatMul(root, h, v.var);
  ops::Identity(root.WithOpName("h"), h);
  const std::string graph = Temp("slow.dfg"), v0 = Temp("slow_v0.dfckpt"),
                    out = Temp("slow.dfckpt");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), graph).ok());
  ASSERT_EQ(RunTool(graph + " --target " + v.init.node_name() + " --save " + v0).code, 0);
  std::filesystem::remove(out);
  Background run({graph, "--restore", v0, "--target", "h", "--steps", "1000", "--checkpoint-every",
                  "1", "--save", out},
                 Temp("slow.log"));
  ASSERT_TRUE(run.started());
  // The checkpoint after step 1: step 2 is under way.
  ASSERT_TRUE(WaitForFile(out, std::chrono::seconds(120))) << run.Output();
  run.Signal(SIGINT);
  // Two signals sent back to back may arrive as one (a pending signal is not queued twice): the
  // second goes once dflow-run has said it took the first, while the step is still running.
  for (int i = 0; i < 1000 && run.Output().find("dflow-run: interrupted") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  run.Signal(SIGINT);
  std::optional<int> code = run.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << run.Output();
  const std::string output = run.Output();
  EXPECT_EQ(*code, 130) << output;
  EXPECT_NE(output.find("second signal: ending now"), std::string::npos) << output;
  EXPECT_EQ(output.find("steps: median"), std::string::npos) << output;
}

}  // namespace
}  // namespace dflow
