// What the rewrite tests share: graphs as a session holds them, op counts of a planned graph,
// and a run with and without the plan rewrites (rewrite/fusion.h, rewrite/subgraph_fusion.h,
// rewrite/channel_blocks.h) whose values must agree.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {

inline std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (int i = 0; i < g.num_nodes(); ++i) counts[g.node(i).op()]++;
  return counts;
}

using testing::Validated;

inline int Id(const Graph& g, const Output& o) { return *g.FindNode(o.node_name()); }

inline Output Const(const Scope& s, const Shape& shape, uint32_t seed) {
  return ops::Const(s, testing::RandomFloats(shape.num_elements(), seed), shape);
}

// Runs with and without the plan rewrites (SessionOptions::fuse_epilogues) and expects the same
// values within `tolerance` (NaN where the unrewritten run has NaN); returns the rewritten
// plan's graph ops.
inline std::map<std::string, int> ExpectSameWithFusion(const Scope& root,
                                                       const Session::Feeds& feeds,
                                                       const std::vector<std::string>& fetches,
                                                       double tolerance = 1e-4) {
  std::vector<std::vector<Tensor>> results;
  std::map<std::string, int> fused_ops;
  for (bool fuse : {false, true}) {
    SessionOptions options;
    options.fuse_epilogues = fuse;
    auto session = LocalSession::Create(root, options);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    if (!session.ok()) return {};
    auto out = (*session)->Run(feeds, fetches);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return {};
    results.push_back(*out);
    if (fuse) fused_ops = OpCounts(*(*session)->PlannedGraph(feeds, fetches).value());
  }
  for (size_t f = 0; f < fetches.size(); ++f) {
    const Tensor& a = results[0][f];
    const Tensor& b = results[1][f];
    EXPECT_EQ(a.shape(), b.shape()) << fetches[f];
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(y)) << fetches[f] << " " << i << ": " << y << " where NaN";
      } else if (std::isinf(x)) {
        EXPECT_EQ(x, y) << fetches[f] << " " << i;
      } else {
        EXPECT_NEAR(x, y, tolerance) << fetches[f] << " " << i;
      }
    }
  }
  return fused_ops;
}

}  // namespace dflow
