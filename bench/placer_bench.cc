// Placement plus partitioning time on generated graphs of 10k, 100k and 1M nodes over four CPU
// devices (targets: 100k nodes in 0.5 s, 1M in 6 s), with the time to build one device's graph
// from the partition (what compiling it starts with) reported beside it; and the model-parallel
// MLP's training step on two devices against one.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>

#include "bench/generated_graph.h"
#include "bench/wide_mlp.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "partition/partition.h"
#include "placer/placer.h"
#include "runtime/session.h"

namespace dflow {
namespace {

void BM_PlaceAndPartition(benchmark::State& state) {
  const int devices = 4;
  Graph g = Generated(state.range(0), devices);
  DeviceSet set = DeviceSet::LocalCpus(devices).value();
  double cross = 0, place_s = 0, partition_s = 0, build_s = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    auto report = Place(g, set);
    if (!report.ok()) std::abort();
    auto placed = std::chrono::steady_clock::now();
    auto parts = PartitionGraph(g, set, report->device_of);
    if (!parts.ok()) std::abort();
    cross = parts->send_recv_pairs;
    place_s += std::chrono::duration<double>(placed - start).count();
    partition_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - placed).count();
    state.PauseTiming();
    {
      auto built_start = std::chrono::steady_clock::now();
      auto g0 = BuildPartitionGraph(g, set, *parts, 0);
      if (!g0.ok()) std::abort();
      build_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - built_start).count();
    }
    state.ResumeTiming();
  }
  state.counters["build_one_s"] = build_s / static_cast<double>(state.iterations());
  state.counters["nodes"] = static_cast<double>(state.range(0));
  state.counters["send_recv_pairs"] = cross;
  state.counters["place_s"] = place_s / static_cast<double>(state.iterations());
  state.counters["partition_s"] = partition_s / static_cast<double>(state.iterations());
}
BENCHMARK(BM_PlaceAndPartition)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// The model-parallel example's network (784-2048-2048-10, Adam, batch 128) on `devices` CPU
// devices of 72 MiB each (one device: no limit, the whole machine).
void BM_ModelParallelStep(benchmark::State& state) {
  int devices = static_cast<int>(state.range(0));
  bench::WideMlp m;
  SessionOptions options;
  if (devices > 1) {
    for (int i = 0; i < devices; ++i) options.devices.push_back("cpu:" + std::to_string(i));
    options.device_memory_bytes = 72.0 * (1 << 20);
    // The limit is enforced at run time: place for the batch the steps run.
    options.placer.costs.unknown_dim = 128;
  }
  auto session = Session::Create(m.root, options);
  if (!session.ok()) std::abort();
  if (!(*session)->Run({}, {}, m.init).ok()) std::abort();
  Session::Feeds feeds = bench::WideMlp::Batch();
  for (int i = 0; i < 3; ++i) (void)(*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
  for (auto _ : state) {
    auto out = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
}
BENCHMARK(BM_ModelParallelStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(3.0);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
