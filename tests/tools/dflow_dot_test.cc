// dflow-dot end to end: one cluster per device, Send/Recv edges drawn, SVG through Graphviz,
// and the exit codes and error lines.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "tools/run_tool.h"
#include "tools/subprocess.h"

namespace dflow {
namespace {

using testing::Ran;
using testing::Temp;

Ran RunDot(const std::string& args) { return testing::RunBinary(DFLOW_DOT_BINARY, args); }
Ran RunDot(const std::vector<std::string>& args) {
  return testing::RunBinary(DFLOW_DOT_BINARY, args);
}

// Two layers pinned to cpu:0 and cpu:1: two tensors cross (h to the second layer, and y back
// to "out" on cpu:0).
std::string SavedPinnedGraph(bool pinned = true) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{4, 8});
  auto h = ops::Tanh(
      root.WithOpName("layer1/h").WithDevice("cpu:0"),
      ops::MatMul(root.WithOpName("layer1/mm").WithDevice("cpu:0"), x, x, {.transpose_b = true}));
  auto y = ops::Tanh(root.WithOpName("layer2/y").WithDevice("cpu:1"),
                     ops::MatMul(root.WithOpName("layer2/mm").WithDevice("cpu:1"), h, h));
  ops::Identity(root.WithOpName("out").WithDevice("cpu:0"), y);
  Graph g;
  for (int id = 0; id < root.graph().num_nodes(); ++id) {
    NodeDef def = root.graph().node(id).def();
    if (!pinned) def.device.clear();
    EXPECT_TRUE(g.AddNode(std::move(def)).ok());
  }
  EXPECT_TRUE(g.Validate().ok());
  std::string path = Temp(pinned ? "pinned.dfg" : "unpinned.dfg");
  EXPECT_TRUE(serialization::SaveGraph(g, path).ok());
  return path;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DflowDotTest, OneClusterPerDeviceAndSendRecvEdges) {
  std::string path = SavedPinnedGraph();
  Ran r = RunDot(path + " --devices cpu:1,cpu:0 -o " + Temp("pinned.dot"));
  ASSERT_EQ(r.code, 0) << r.output;
  // The placement's summary, as dflow-run prints it.
  EXPECT_NE(r.output.find("placement on 2 devices: predicted step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  cpu:1: 2 nodes, variables and constants 0.00 MiB"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("2 devices, 6 nodes, 2 cross-device edges"), std::string::npos)
      << r.output;
  std::string dot = *serialization::ReadFile(Temp("pinned.dot"));
  EXPECT_EQ(Count(dot, "subgraph cluster_"), 2) << dot;
  EXPECT_NE(dot.find("label=\"cpu:0\""), std::string::npos);
  EXPECT_NE(dot.find("label=\"cpu:1\""), std::string::npos);
  // The crossing edges, labelled with type and bytes: h is f32[4,4], 64 B.
  EXPECT_EQ(Count(dot, "Send/Recv"), 2) << dot;
  EXPECT_NE(dot.find("\"layer1/h\" -> \"layer2/mm\" [color=\"#d62728\", penwidth=2, "
                     "label=\"Send/Recv\\nf32[4,4] 64 B\"]"),
            std::string::npos)
      << dot;
  // Without --devices: the requested devices.
  Ran requested = RunDot(path);
  ASSERT_EQ(requested.code, 0);
  EXPECT_NE(requested.output.find("label=\"/device:CPU:1\""), std::string::npos)
      << requested.output;
  // --fixed-costs: the cost placer places the unpinned graph the same way on every run
  // (calibration can tip close choices).
  std::string unpinned = SavedPinnedGraph(false);
  Ran first = RunDot(unpinned + " --devices cpu:0,cpu:1 --fixed-costs");
  ASSERT_EQ(first.code, 0) << first.output;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunDot(unpinned + " --devices cpu:0,cpu:1 --fixed-costs").output, first.output);
  }
  // Collapsed scopes: one box per scope and device.
  Ran collapsed = RunDot(path + " --devices cpu:0,cpu:1 --collapse-scopes");
  ASSERT_EQ(collapsed.code, 0);
  EXPECT_NE(collapsed.output.find("\"layer1/*@cpu:0\" [label=\"layer1/*\\n2 nodes\""),
            std::string::npos)
      << collapsed.output;
  // SVG through Graphviz (installed by scripts/setup.sh).
  if (!tools::FindProgram("dot")) GTEST_SKIP() << "no Graphviz dot";
  Ran svg = RunDot(path + " --devices cpu:0,cpu:1 -o " + Temp("pinned.svg"));
  ASSERT_EQ(svg.code, 0) << svg.output;
  std::string text = *serialization::ReadFile(Temp("pinned.svg"));
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("cpu:1"), std::string::npos);
}

// --micro-batches: the stages of a training graph (two dense layers, SGD) as boxes, each
// layer with its weight, its gradient and its update on its stage's device; the plan on stderr.
TEST(DflowDotTest, MicroBatchesDrawThePipelinesStages) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 256});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto w0 = ops::InitializedVariable(root.WithOpName("w0"), Shape{256, 256},
                                     ops::Initializer::GlorotUniform(1));
  auto w1 = ops::InitializedVariable(root.WithOpName("w1"), Shape{256, 4},
                                     ops::Initializer::GlorotUniform(2));
  auto h = ops::Tanh(root.WithOpName("hidden"), ops::MatMul(root.WithOpName("dense0"), x, w0.var));
  auto logits = ops::MatMul(root.WithOpName("dense1"), h, w1.var);
  auto loss = ops::ReduceMean(root.WithOpName("loss"),
                              ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels).loss);
  ops::SGD({}).Minimize(root, loss, {w0.var, w1.var});
  const std::string path = Temp("two_layers.dfg");
  ASSERT_TRUE(serialization::SaveGraph(root.graph(), path).ok());
  Ran drawn = RunDot(path + " --stages 2 --micro-batches 4 --assume-batch 64");
  ASSERT_EQ(drawn.code, 0) << drawn.output;
  EXPECT_NE(drawn.output.find("pipeline: 2 stages x 4 micro-batches (1f1b)"), std::string::npos)
      << drawn.output;
  // The box of each stage holds its nodes.
  auto in_box = [&](const std::string& box, const std::string& node) {
    size_t at = drawn.output.find("label=\"" + box + "\"");
    size_t end = drawn.output.find("  }", at);
    size_t found = drawn.output.find("\"" + node + "\" [label=", at);
    return at != std::string::npos && found != std::string::npos && found < end;
  };
  for (const char* node : {"dense0", "w0", "w0/update/ApplySGD"}) {
    EXPECT_TRUE(in_box("stage 0: cpu:0", node)) << node << "\n" << drawn.output;
  }
  for (const char* node : {"dense1", "w1", "w1/update/ApplySGD", "loss"}) {
    EXPECT_TRUE(in_box("stage 1: cpu:1", node)) << node << "\n" << drawn.output;
  }

  Ran no_batch = RunDot(path + " --stages 2 --micro-batches 4");
  EXPECT_EQ(no_batch.code, 2) << no_batch.output;
  EXPECT_NE(no_batch.output.find("error: InvalidArgument: --micro-batches needs --assume-batch"),
            std::string::npos)
      << no_batch.output;
  Ran no_devices = RunDot(path + " --micro-batches 4 --assume-batch 64");
  EXPECT_EQ(no_devices.code, 2) << no_devices.output;
  EXPECT_NE(no_devices.output.find("--micro-batches needs the stages' devices"), std::string::npos)
      << no_devices.output;
}

TEST(DflowDotTest, ExitCodesAndErrorLines) {
  std::string path = SavedPinnedGraph();
  struct Case {
    std::string args;
    int code;
    std::string words;
  };
  std::vector<Case> cases = {
      {"", 2, "error: InvalidArgument:"},
      {path + " -o out.pdf", 2, "error: InvalidArgument: -o 'out.pdf'"},
      {path + " --placer other", 2, "error: InvalidArgument:"},
      {Temp("nothing.dfg"), 1, "error: NotFound: cannot open"},
      {path + " --devices cpu:0", 1, "error: FailedPrecondition:"},
      {path + " --devices cpu:1,CPU:1", 2,
       "error: InvalidArgument: --devices 'cpu:1,CPU:1': 'cpu:1' and 'CPU:1' are the same "
       "device, cpu:1"},
      {path + " --memory-limit 1MiB", 2,
       "error: InvalidArgument: --memory-limit and --assume-batch tune the placer; give "
       "--devices"},
      {path + " --devices cpu:0,cpu:1 --memory-limit 12XB", 2,
       "error: InvalidArgument: --memory-limit: '12XB' is not a size"},
      {path + " --devices cpu:0,cpu:1 --memory-limit 100B", 1,
       "error: ResourceExhausted: no placement found whose variables, constants and peak "
       "activations fit"},
  };
  for (const Case& c : cases) {
    Ran r = RunDot(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.words), std::string::npos) << r.output;
    EXPECT_EQ(Count(r.output, "\n"), 1) << r.output;
  }
}

// Issue 11: the output path went to a shell, so `-o 'x$(cmd).svg'` ran cmd. Now Graphviz runs
// without one: the file gets exactly the name given and nothing in it runs.
TEST(DflowDotTest, OutputPathIsNeverInterpretedByAShell) {
  if (!tools::FindProgram("dot")) GTEST_SKIP() << "no Graphviz dot";
  std::string graph = SavedPinnedGraph();
  // A fresh working directory: the injected commands would create "marker" in it.
  std::filesystem::path dir = Temp("dot_injection");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  for (std::string name :
       {"x$(touch marker).svg", "x`touch marker`.png", "a \"b\" 'c' ;touch marker; $HOME.svg"}) {
    Ran r = RunDot({graph, "--devices", "cpu:0,cpu:1", "-o", name});
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
    EXPECT_FALSE(std::filesystem::exists(dir / "marker")) << name;
    auto written = serialization::ReadFile((dir / name).string());
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    if (name.ends_with(".svg")) {
      EXPECT_NE(written->find("<svg"), std::string::npos) << name;
    } else {
      EXPECT_EQ(written->substr(1, 3), "PNG") << name;
    }
  }
  std::filesystem::current_path(cwd);
}

// The Graphviz errors: no dot on PATH, and a dot that fails. Each names the output file, and
// no file is left behind.
TEST(DflowDotTest, MissingOrFailingGraphvizNamesTheOutputFile) {
  std::string graph = SavedPinnedGraph();
  std::filesystem::path bin = Temp("fake_graphviz");
  std::filesystem::remove_all(bin);
  std::filesystem::create_directories(bin);
  std::string out = Temp("never written.svg");
  std::filesystem::remove(out);
  auto run_with_path = [&](const std::string& path) {
    auto ran = tools::RunProgram({"env", "PATH=" + path, DFLOW_DOT_BINARY, graph, "-o", out}, "",
                                 /*merge_stderr=*/true);
    EXPECT_TRUE(ran.ok()) << ran.status().ToString();
    return ran.ok() ? Ran{ran->exit_code, ran->out} : Ran{-1, ""};
  };
  Ran missing = run_with_path(bin.string());  // an empty folder: no dot
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_EQ(missing.output,
            "error: NotFound: writing " + out +
                " needs Graphviz's dot program, which is not on PATH (apt install graphviz); -o " +
                Temp("never written") + ".dot writes DOT without it\n");
  EXPECT_FALSE(std::filesystem::exists(out));

  // A dot that reads part of its input, complains and exits 3.
  {
    std::ofstream fake(bin / "dot");
    fake << "#!/bin/sh\nhead -c 10 >/dev/null\necho 'Error: <stdin>: syntax error in line 1' "
            ">&2\necho 'second line' >&2\nexit 3\n";
  }
  std::filesystem::permissions(bin / "dot", std::filesystem::perms::owner_all);
  Ran failing = run_with_path(bin.string() + ":/usr/bin:/bin");
  EXPECT_EQ(failing.code, 1) << failing.output;
  EXPECT_EQ(failing.output, "error: Internal: writing " + out +
                                ": Graphviz's dot -Tsvg failed (exit status 3): Error: <stdin>: "
                                "syntax error in line 1\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace dflow
