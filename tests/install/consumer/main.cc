// Built against an installed dflow (tests/install/install_test.sh), with CMake's
// find_package(dflow) and with pkg-config: fits y = 3x + 1 with SGD, saves and reloads the graph,
// and checks the results against the closed form and the trained session. Exits non-zero on any
// mismatch.
#include <dflow/dflow.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace dflow;

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: consumer SCRATCH_DIR");
  const std::string scratch = argv[1];
  if (std::strcmp(LibraryVersion(), DFLOW_VERSION_STRING) != 0) {
    return Fail(std::string("headers of ") + DFLOW_VERSION_STRING + ", library of " +
                LibraryVersion());
  }

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1});
  auto y = ops::Placeholder(root.WithOpName("y"), DType::kF32, Shape{-1, 1});
  auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{1, 1}, ops::Initializer::Zeros());
  auto b = ops::InitializedVariable(root.WithOpName("b"), Shape{1}, ops::Initializer::Zeros());
  auto pred = ops::BiasAdd(root.WithOpName("pred"), ops::MatMul(root, x, w.var), b.var);
  auto diff = ops::Sub(root, pred, y);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), ops::Mul(root, diff, diff));
  auto step = ops::SGD({.learning_rate = 0.1}).Minimize(root, loss, {w.var, b.var});

  std::vector<float> xs, ys;
  for (int i = 0; i < 16; ++i) {
    xs.push_back(i / 8.0f - 1);
    ys.push_back(3 * xs.back() + 1);
  }
  Session::Feeds feeds = {{"x", Tensor::FromVector<float>(xs, Shape{16, 1})},
                          {"y", Tensor::FromVector<float>(ys, Shape{16, 1})}};
  auto session = Session::Create(root);
  if (!session.ok()) return Fail(session.status().ToString());
  if (Status s = (*session)->Run({}, {}, {w.init.node_name(), b.init.node_name()}).status();
      !s.ok()) {
    return Fail(s.ToString());
  }
  for (int i = 0; i < 300; ++i) {
    if (Status s = (*session)->Run(feeds, {}, {step.name()}).status(); !s.ok()) {
      return Fail(s.ToString());
    }
  }
  auto wb = (*session)->Run({}, {w.var.name(), b.var.name()});
  if (!wb.ok()) return Fail(wb.status().ToString());
  const float wv = wb->at(0).data<float>()[0], bv = wb->at(1).data<float>()[0];
  std::printf("trained: w = %.5f, b = %.5f (closed form 3, 1)\n", wv, bv);
  if (std::fabs(wv - 3) > 1e-3 || std::fabs(bv - 1) > 1e-3) return Fail("did not converge");

  // The graph and the weights through dflow's files, then a fresh session gives the same
  // predictions.
  const std::string graph_file = scratch + "/linear.dfg", ckpt = scratch + "/linear.ckpt";
  if (Status s = serialization::SaveGraph(root.graph(), graph_file); !s.ok()) {
    return Fail(s.ToString());
  }
  if (Status s = (*session)->SaveCheckpoint(ckpt); !s.ok()) return Fail(s.ToString());
  auto loaded = serialization::LoadGraph(graph_file);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  auto again = Session::Create(std::move(*loaded));
  if (!again.ok()) return Fail(again.status().ToString());
  if (Status s = (*again)->RestoreCheckpoint(ckpt); !s.ok()) return Fail(s.ToString());
  auto first = (*session)->Run(feeds, {"pred"});
  auto second = (*again)->Run(feeds, {"pred"});
  if (!first.ok() || !second.ok()) return Fail("prediction failed");
  for (int i = 0; i < 16; ++i) {
    if (first->at(0).data<float>()[i] != second->at(0).data<float>()[i]) {
      return Fail("the reloaded graph predicts differently at row " + std::to_string(i));
    }
  }
  std::printf("dflow %s: reloaded graph and checkpoint predict the same\n", LibraryVersion());
  return 0;
}
