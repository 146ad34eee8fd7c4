// A generated graph for the benchmarks that need a large one (placement, graph files).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/register.h"

namespace dflow {

// Layers of Add/Identity nodes over [256] f32 tensors, each reading random nodes of the
// previous layers; a tenth of the nodes request a random device.
inline Graph Generated(int64_t n, int devices) {
  ops::RegisterStandardOps();
  std::mt19937 gen(7);
  Graph g;
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) {
    NodeDef d{.name = "in" + std::to_string(i), .op = "Placeholder"};
    d.attrs = {{"dtype", DType::kF32}, {"shape", Shape{256}}};
    names.push_back(d.name);
    (void)g.AddNode(std::move(d));
  }
  for (int64_t i = names.size(); i < n; ++i) {
    NodeDef d;
    d.name = "n" + std::to_string(i);
    int64_t window = std::min<int64_t>(static_cast<int64_t>(names.size()), 64);
    auto pick = [&] { return names[names.size() - 1 - gen() % window]; };
    if (gen() % 2) {
      d.op = "Add";
      d.inputs = {{pick(), 0}, {pick(), 0}};
    } else {
      d.op = "Identity";
      d.inputs = {{pick(), 0}};
    }
    if (gen() % 10 == 0) d.device = "/device:CPU:" + std::to_string(gen() % devices);
    names.push_back(d.name);
    (void)g.AddNode(std::move(d));
  }
  if (!g.Validate().ok()) std::abort();
  return g;
}

}  // namespace dflow
