// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "ops/register.h"
#include "runtime/session.h"
#include "status_matchers.h"

namespace dflow::testing {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The scope's graph, after checking that it validates.
inline Graph Validated(const Scope& root) {
  Graph g = root.graph();
  Status s = g.Validate();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return g;
}

// Runs the scope's graph once and returns the fetched tensors; fails the test on error.
inline std::vector<Tensor> RunScope(const Scope& scope, const Session::Feeds& feeds,
                                    const std::vector<Output>& fetches) {
  auto session = Session::Create(scope);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return {};
  std::vector<std::string> names;
  for (const auto& f : fetches) names.push_back(f.name());
  auto out = (*session)->Run(feeds, names);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::vector<Tensor>{};
}

// Session options for n virtual CPU devices cpu:0 .. cpu:n-1.
inline SessionOptions Devices(int n) {
  SessionOptions o;
  for (int i = 0; i < n; ++i) o.devices.push_back("cpu:" + std::to_string(i));
  return o;
}

// A _Recv on cpu:1 of a tensor that no Send ever sends (from cpu:0): a step that needs it waits
// until it is aborted, by a deadline or a cancellation.
inline Output OrphanRecv(const Scope& root) {
  ops::RegisterStandardOps();  // a raw AddNode needs the registry
  int id = root.WithOpName("orphan").WithDevice("cpu:1").AddNode(
      "_Recv", {},
      {{"T", DType::kF32},
       {"shape", Shape{2}},
       {"tensor_name", std::string("nobody:0")},
       {"send_device", std::string("/job:localhost/task:0/device:CPU:0")},
       {"recv_device", std::string("/job:localhost/task:0/device:CPU:1")}});
  return id >= 0 ? root.OutputOf(id) : Output();  // on failure the scope keeps the error
}

// Uniform values in [lo, hi) from a fixed seed.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace dflow::testing
