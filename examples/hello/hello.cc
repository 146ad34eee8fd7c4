// y = relu(x·W + b), built with the builder API, run on the CPU and printed. With --save FILE.dfg
// it writes the graph instead, for dflow-run and dflow-dot, and with --save-input FILE.npy the
// input it feeds, for dflow-run --feed.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "runtime/session.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "tools/cli.h"

using namespace dflow;

int main(int argc, char** argv) {
  CLI::App app("Builds y = relu(x·W + b), runs it on the CPU and checks it against plain loops");
  tools::Configure(app, "hello");
  std::string save, save_input;
  app.add_option("--save", save,
                 "Write the graph to FILE.dfg (or .json) for dflow-run and dflow-dot, then exit");
  app.add_option("--save-input", save_input,
                 "Write the input x (f32[2,3]) to FILE.npy for dflow-run --feed, then exit");
  if (auto code = tools::Parse(app, argc, argv)) return *code;
  Tensor input = Tensor::FromVector<float>({1, 2, 3, -1, 0, 1}, Shape{2, 3});
  if (!save_input.empty()) {
    if (Status s = serialization::WriteNpy(input, save_input); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("saved the input x (f32[2,3]) to %s\n", save_input.c_str());
    if (save.empty()) return 0;
  }

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3});
  auto w = ops::Const(root.WithOpName("W"), std::vector<float>{1, -1, 0.5f, 2, 0, -2}, Shape{3, 2});
  auto b = ops::Const(root.WithOpName("b"), std::vector<float>{0.5f, -0.5f}, Shape{2});
  auto y = ops::Relu(root.WithOpName("y"), ops::BiasAdd(root, ops::MatMul(root, x, w), b));

  if (!save.empty()) {
    Graph graph = root.graph();
    Status s = graph.Validate();
    if (s.ok()) s = serialization::SaveGraph(graph, save);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("saved the graph (%d nodes; feed 'x' f32[?,3], fetch '%s') to %s\n",
                graph.num_nodes(), y.name().c_str(), save.c_str());
    return 0;
  }

  auto session = Session::Create(root);
  if (!session.ok()) {
    std::fprintf(stderr, "error: %s\n", session.status().ToString().c_str());
    return 1;
  }
  auto out = (*session)->Run({{"x", input}}, {y.name()});
  if (!out.ok()) {
    std::fprintf(stderr, "error: %s\n", out.status().ToString().c_str());
    return 1;
  }
  std::printf("x = %s\n", input.DebugString().c_str());
  std::printf("y = relu(x·W + b) = %s\n", out->at(0).DebugString().c_str());

  // The same sum with plain loops: the example fails if they differ.
  const float* pw = std::get<Tensor>(*w.node().FindAttr("value")).data<float>();
  const float pb[2] = {0.5f, -0.5f};
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      float acc = pb[j];
      for (int k = 0; k < 3; ++k) acc += input.data<float>()[i * 3 + k] * pw[k * 2 + j];
      float want = acc > 0 ? acc : 0;
      if (out->at(0).data<float>()[i * 2 + j] != want) {
        std::fprintf(stderr, "error: y[%d,%d] = %g, expected %g\n", i, j,
                     out->at(0).data<float>()[i * 2 + j], want);
        return 1;
      }
    }
  }
  return 0;
}
