// Saving and loading a graph file of 1M nodes (target: 1 s each). The file goes to $TMPDIR (or
// /tmp) and is removed after.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench/generated_graph.h"
#include "serialization/graph_file.h"

namespace dflow {
namespace {

std::string TempPath() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/dflow_bench_graph.dfg";
}

void BM_SaveGraph(benchmark::State& state) {
  Graph g = Generated(state.range(0), 4);
  std::string path = TempPath();
  for (auto _ : state) {
    if (!serialization::SaveGraph(g, path).ok()) std::abort();
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  state.counters["file_bytes"] = static_cast<double>(std::ftell(f));
  std::fclose(f);
  std::remove(path.c_str());
}
BENCHMARK(BM_SaveGraph)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_LoadGraph(benchmark::State& state) {
  std::string path = TempPath();
  {
    Graph g = Generated(state.range(0), 4);
    if (!serialization::SaveGraph(g, path).ok()) std::abort();
  }
  int nodes = 0;
  double first_s = -1;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    auto g = serialization::LoadGraph(path);
    if (!g.ok()) std::abort();
    nodes = g->num_nodes();
    state.PauseTiming();  // freeing the graph is not loading it
    if (first_s < 0) {
      // The first load pays for the heap's first page faults; later ones reuse its pages.
      first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    g = Graph();
    state.ResumeTiming();
  }
  state.counters["first_load_s"] = first_s;
  state.counters["nodes"] = nodes;
  std::remove(path.c_str());
}
BENCHMARK(BM_LoadGraph)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
