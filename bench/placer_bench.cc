// Placement plus partitioning time on generated graphs of 10k, 100k and 1M nodes over four CPU
// devices (targets: 100k nodes in 0.5 s, 1M in 6 s), with the time to build one device's graph
// from the partition (what compiling it starts with) reported beside it; and the model-parallel
// MLP's training step on two devices against one.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "bench/generated_graph.h"
#include "bench/wide_mlp.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "partition/partition.h"
#include "placer/pipeline.h"
#include "placer/placer.h"
#include "runtime/session.h"
#include "runtime/session_devices.h"

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

// Pipeline parallelism: DeepMlp (1536 inputs, 4 layers of 1024 and a head, Adam; training it
// needs about twice one device's limit of kPipelineLimit) at batch kPipelineBatch. Modes:
//   0  one device, one thread, no limit          1  one device, both threads, no limit
//   2  two devices of one thread and the limit, split by the placer without micro-batches
//   3  the same devices pipelined, 1F1B, 8 micro-batches (GPipe would hold all 8 micro-batches'
//      activations: no cut fits the limit)
// The pipelined mode reports the plan's predicted step (predicted_ms) and the prediction from
// the node times of profiled steps (profiled_predicted_ms).
using bench::kPipelineBatch;
using bench::kPipelineInputs;
using bench::kPipelineLayers;
using bench::kPipelineLimit;
using bench::kPipelineWidth;

void BM_PipelineStep(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  bench::DeepMlp m(kPipelineLayers, kPipelineWidth, kPipelineInputs);
  SessionOptions options;
  options.threads.num_threads = mode == 0 ? 1 : 2;
  Graph graph = m.root.graph();
  if (mode >= 2) {
    options.devices = {"cpu:0", "cpu:1"};
    options.device_memory_bytes = kPipelineLimit;
    options.placer.costs.unknown_dim = kPipelineBatch;
  }
  PipelineOptions pipeline;
  const bool print_plans = std::getenv("DFLOW_BENCH_PIPELINE_PLANS") != nullptr;
  Result<SessionDevices> devices = InvalidArgument("unused");
  if (mode >= 3) {
    devices = CreateSessionDevices(options);
    if (!devices.ok()) {
      state.SkipWithError(devices.status().ToString().c_str());
      return;
    }
    pipeline.devices = options.devices;
    pipeline.micro_batches = 8;
    pipeline.schedule = PipelineSchedule::k1F1B;
    pipeline.loss = m.loss.node_name();
    pipeline.device_set = &devices->set;
    pipeline.costs.unknown_dim = kPipelineBatch;
    auto piped = Pipeline(graph, pipeline);
    if (!piped.ok()) {
      state.SkipWithError(piped.status().ToString().c_str());
      return;
    }
    state.counters["predicted_ms"] = piped->plan.predicted_step_s * 1e3;
    state.counters["stages"] = piped->plan.stages();
    state.counters["micro_batches"] = pipeline.micro_batches;
    if (print_plans) std::fprintf(stderr, "calibrated %s", piped->Summary().c_str());
    graph = *piped->graph;
    // The session's placer sees the micro-batches' tensors, whose batch dimension is unknown.
    options.placer.costs.unknown_dim = kPipelineBatch / pipeline.micro_batches;
  }
  auto session = Session::Create(graph, options);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  if (!(*session)->Run({}, {}, m.init).ok()) std::abort();
  Session::Feeds feeds = m.Batch(kPipelineBatch);
  for (int i = 0; i < 3; ++i) (void)(*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
  for (auto _ : state) {
    auto out = (*session)->Run(feeds, {m.loss.name()}, {m.step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  if (mode >= 3) {
    // The plan again from the node times of profiled steps: the schedule's prediction from
    // measured figures.
    Session::RunOptions profiled;
    profiled.profile = true;
    for (int i = 0; i < 5; ++i)
      (void)(*session)->Run(feeds, {m.loss.name()}, {m.step.name()}, profiled);
    const MeasuredCosts measured =
        PipelineNodeCosts((*session)->MeasuredNodeCosts(), m.root.graph());
    pipeline.costs.measured = &measured;
    auto again = Pipeline(m.root.graph(), pipeline);
    if (again.ok()) {
      state.counters["profiled_predicted_ms"] = again->plan.predicted_step_s * 1e3;
      if (print_plans) std::fprintf(stderr, "profiled %s", again->Summary().c_str());
    }
  }
  const StepStats stats = (*session)->last_step_stats();
  for (size_t d = 0; d < stats.device_peak_bytes.size(); ++d) {
    state.counters["peak_mib_" + std::to_string(d)] =
        static_cast<double>(stats.device_peak_bytes[d]) / (1 << 20);
  }
  state.counters["items_per_second"] =
      benchmark::Counter(kPipelineBatch, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PipelineStep)
    ->DenseRange(0, 3)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
