// Executor overhead per node, timed after warm-up: a 100k-node chain and a 100k-node
// fan-out/fan-in of trivial ops (Identity on a scalar, which only passes a reference on), and a
// 100k-node chain of scalar Adds (a real kernel per node). The counter ns_per_node is the run
// time divided by the node count. And the fixed cost of a step on one device and across two.
#include <benchmark/benchmark.h>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "runtime/session.h"

namespace dflow {
namespace {

constexpr int kNodes = 100000;

struct Built {
  std::unique_ptr<Session> session;
  std::string fetch;
  std::string target;
  int nodes;
};

// The smallest step that crosses devices: a scalar Const on cpu:0 read by an Identity on cpu:1
// (one Send/Recv pair); with `devices` 1 both sit on one device. Its run time is the fixed
// cost of a step: the session's checks, the rendezvous, waking the other device's thread and
// handing the tensor over.
Built EmptyStep(int devices) {
  Scope root = Scope::NewRootScope();
  Output x = ops::Const(root.WithOpName("x").WithDevice("cpu:0"), 1.0f);
  Output y = ops::Identity(root.WithOpName("y").WithDevice(devices > 1 ? "cpu:1" : "cpu:0"), x);
  SessionOptions options;
  for (int i = 0; i < devices; ++i) options.devices.push_back("cpu:" + std::to_string(i));
  options.calibrate_devices = false;
  auto s = Session::Create(root, options);
  if (!s.ok()) std::abort();
  return {std::move(s).value(), y.name(), "", 2};
}

// x -> Identity -> Identity -> ... (kNodes nodes in all).
Built Chain() {
  Scope root = Scope::NewRootScope();
  Output y = ops::Const(root, 1.0f);
  for (int i = 1; i < kNodes; ++i) y = ops::Identity(root, y);
  auto s = Session::Create(root);
  if (!s.ok()) std::abort();
  return {std::move(s).value(), y.name(), "", kNodes};
}

// A chain of scalar Adds: each node runs a real kernel (broadcast check, output in place).
Built AddChain() {
  Scope root = Scope::NewRootScope();
  Output one = ops::Const(root, 1.0f);
  Output y = ops::Const(root, 0.0f);
  for (int i = 2; i < kNodes; ++i) y = ops::Add(root, y, one);
  auto s = Session::Create(root);
  if (!s.ok()) std::abort();
  return {std::move(s).value(), y.name(), "", kNodes};
}

// x -> kNodes-2 Identities -> one NoOp with a control edge from each.
Built FanOutFanIn() {
  Scope root = Scope::NewRootScope();
  Output x = ops::Const(root, 1.0f);
  std::vector<Output> branches;
  for (int i = 0; i < kNodes - 2; ++i) branches.push_back(ops::Identity(root, x));
  auto sink = ops::NoOp(root.WithControlDependencies(branches).WithOpName("sink"));
  auto s = Session::Create(root);
  if (!s.ok()) std::abort();
  return {std::move(s).value(), "", sink.name(), kNodes};
}

void Run(benchmark::State& state, Built b) {
  std::vector<std::string> fetches, targets;
  if (!b.fetch.empty()) fetches.push_back(b.fetch);
  if (!b.target.empty()) targets.push_back(b.target);
  for (int i = 0; i < 3; ++i) {  // warm-up: compiles and caches the plan
    if (!b.session->Run({}, fetches, targets).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = b.session->Run({}, fetches, targets);
    benchmark::DoNotOptimize(out);
  }
  // Inverted iteration-invariant rate: seconds per (iteration x value), here ns per node.
  state.counters["ns_per_node"] = benchmark::Counter(
      1e-9 * b.nodes, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_ExecutorChain(benchmark::State& state) { Run(state, Chain()); }
void BM_ExecutorFanOutFanIn(benchmark::State& state) { Run(state, FanOutFanIn()); }
void BM_ExecutorAddChain(benchmark::State& state) { Run(state, AddChain()); }

void BM_PartitionedStepOverhead(benchmark::State& state) {
  Built b = EmptyStep(static_cast<int>(state.range(0)));
  for (int i = 0; i < 3; ++i) {
    if (!b.session->Run({}, {b.fetch}).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = b.session->Run({}, {b.fetch});
    benchmark::DoNotOptimize(out);
  }
}

BENCHMARK(BM_PartitionedStepOverhead)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_ExecutorChain)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ExecutorFanOutFanIn)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ExecutorAddChain)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
