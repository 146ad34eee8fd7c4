// Row blocks: the split graph trains as the original does, with SGD and Adam.
#include "rewrite/split_variables.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rewrite/replicate_fixture.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

void TrainSplitAgainstWhole(bool adam, int64_t max_bytes, const std::map<std::string, int>& want) {
  SCOPED_TRACE(fmt::format("{}, blocks of at most {} bytes", adam ? "Adam" : "SGD", max_bytes));
  Mlp whole(adam), model(adam);
  Graph graph = model.root.graph();
  ASSERT_TRUE(graph.Validate().ok());
  auto split = ops::SplitVariablesIntoRowBlocks(graph, max_bytes);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->blocks, want);
  for (const auto& [name, blocks] : want) {
    for (int b = 0; b < blocks; ++b) {
      EXPECT_TRUE(split->graph.FindNode(fmt::format("{}/part{}", name, b)).has_value()) << name;
    }
    EXPECT_FALSE(split->graph.FindNode(fmt::format("{}/part{}", name, blocks)).has_value());
  }
  auto a = Session::Create(whole.root);
  auto b = Session::Create(split->graph);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Run({}, {}, whole.init).ok());
  auto init = (*b)->Run({}, {}, model.init);
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  for (int step = 0; step < 6; ++step) {
    Session::Feeds feeds = Batch(step, 10);
    auto la = (*a)->Run(feeds, {whole.loss}, {whole.step});
    auto lb = (*b)->Run(feeds, {model.loss}, {model.step});
    ASSERT_TRUE(la.ok() && lb.ok()) << lb.status().ToString();
    EXPECT_NEAR((*lb)[0].data<float>()[0], (*la)[0].data<float>()[0], 1e-6) << "step " << step;
  }
  // Fetching a split variable's name gives its blocks end to end.
  auto va = (*a)->Run({}, whole.variables);
  auto vb = (*b)->Run({}, model.variables);
  ASSERT_TRUE(va.ok() && vb.ok()) << vb.status().ToString();
  for (size_t v = 0; v < model.variables.size(); ++v) {
    EXPECT_EQ((*vb)[v].shape(), (*va)[v].shape()) << model.variables[v];
    auto x = (*va)[v].ToVector<float>(), y = (*vb)[v].ToVector<float>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y[i], x[i], 1e-6 + 1e-6 * std::abs(x[i]))
          << model.variables[v] << "[" << i << "]";
    }
  }
}

TEST(SplitVariablesTest, TheSplitGraphTrainsAsTheWholeOne) {
  // w0 is 8x16 floats (512 bytes), w1 16x4 (256), b0 64, b1 16. With Adam a group also holds m,
  // v (the variable's size each) and an 8-byte step count.
  TrainSplitAgainstWhole(true, 600,
                         {{"w0", 3},
                          {"w0/update/m", 3},
                          {"w0/update/v", 3},
                          {"w1", 2},
                          {"w1/update/m", 2},
                          {"w1/update/v", 2}});
  TrainSplitAgainstWhole(false, 100, {{"w0", 6}, {"w1", 3}});
  // At most one block per row: b0's 16 floats in 16 blocks of one row.
  TrainSplitAgainstWhole(false, 1, {{"w0", 8}, {"w1", 16}, {"b0", 16}, {"b1", 4}});
  TrainSplitAgainstWhole(true, 1 << 20, {});
}

TEST(SplitVariablesTest, VariablesGroupWithTheStateTheirUpdateReads) {
  Mlp model(true);
  Graph graph = model.root.graph();
  ASSERT_TRUE(graph.Validate().ok());
  auto groups = ops::VariableGroups(graph);
  auto id = [&](const std::string& name) { return *graph.FindNode(name); };
  const int w0 = groups.at(id("w0"));
  int in_w0 = 0;
  for (const auto& [var, group] : groups) in_w0 += group == w0;
  EXPECT_EQ(in_w0, 4);  // w0, m, v and step
  EXPECT_NE(groups.at(id("w1")), w0);
}

TEST(SplitVariablesTest, ANonPositiveSizeIsAnError) {
  Mlp model(false);
  Graph graph = model.root.graph();
  ASSERT_TRUE(graph.Validate().ok());
  auto split = ops::SplitVariablesIntoRowBlocks(graph, 0);
  EXPECT_EQ(split.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(split.status(), {"max_bytes must be positive", "0 given"}));
}

}  // namespace
}  // namespace dflow
