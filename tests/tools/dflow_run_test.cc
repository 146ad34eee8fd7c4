// dflow-run end to end: the binary runs a saved graph, and what it writes equals what the C++
// API computes; every exit code and error form.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"
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
  EXPECT_NE(r.output.find("devices (requested by the graph; --devices overrides): "
                          "/device:CPU:0,/device:CPU:1"),
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
  for (const char* flag :
       {"--feed", "--fetch", "--target", "--devices", "--placer", "--cost-file", "--steps",
        "--restore", "--save", "--trace", "--log-placement", "--fixed-costs"}) {
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace dflow
