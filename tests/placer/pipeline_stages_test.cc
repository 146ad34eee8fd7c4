// Pipeline stages: the schedules' unit orders, the simulated step against hand-worked timelines,
// the cut chosen against every cut tried, and memory limits.
#include "placer/pipeline_stages.h"

#include <gtest/gtest.h>

#include <limits>

#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

std::string Render(const std::vector<PipelineUnit>& order) {
  std::string s;
  for (const PipelineUnit& u : order) {
    s += (u.backward ? "B" : "F") + std::to_string(u.micro_batch) + " ";
  }
  return s;
}

TEST(PipelineStagesTest, SchedulesOrderTheUnits) {
  EXPECT_EQ(Render(StageOrder(PipelineSchedule::kGPipe, 0, 2, 3)), "F0 F1 F2 B0 B1 B2 ");
  // 1F1B: stage s of K starts K - s - 1 forwards ahead.
  EXPECT_EQ(Render(StageOrder(PipelineSchedule::k1F1B, 0, 3, 4)), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(Render(StageOrder(PipelineSchedule::k1F1B, 1, 3, 4)), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(Render(StageOrder(PipelineSchedule::k1F1B, 2, 3, 4)), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  // Fewer micro-batches than the warm-up: all forwards first.
  EXPECT_EQ(Render(StageOrder(PipelineSchedule::k1F1B, 0, 4, 2)), "F0 F1 B0 B1 ");
  EXPECT_TRUE(ParseSchedule("gpipe").ok() && ParseSchedule("1f1b").ok());
  auto bad = ParseSchedule("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(MessageHas(bad.status(), {"'zigzag'"}));
}

// Items with one time each way on every device, one byte each, nothing crossing.
StageChain Uniform(const std::vector<double>& forward, const std::vector<double>& backward,
                   int devices) {
  StageChain c;
  for (size_t i = 0; i < forward.size(); ++i) {
    c.forward_s.push_back(std::vector<double>(devices, forward[i]));
    c.backward_s.push_back(std::vector<double>(devices, backward[i]));
    c.update_s.push_back(std::vector<double>(devices, 0));
    c.persistent_bytes.push_back(0);
    c.activation_bytes.push_back(0);
    c.crossing_bytes.push_back(0);
    c.names.push_back("n" + std::to_string(i));
  }
  return c;
}

PipelineDevices StageDevices(int k, double memory = 1e12, double latency = 0) {
  PipelineDevices d;
  for (int s = 0; s < k; ++s) {
    d.names.push_back("cpu:" + std::to_string(s));
    d.memory_bytes.push_back(memory);
    if (s + 1 < k) d.links.push_back({latency, 1e30});
  }
  return d;
}

TEST(PipelineStagesTest, TheSimulatedStepFollowsTheSchedule) {
  // Two equal stages, forward 1 and backward 2 per micro-batch, M = 4. GPipe: stage 0's forwards
  // end at 4, stage 1's at 5; stage 1's backwards at 7, 9, 11, 13; stage 0's follow each by 2
  // and end at 15.
  StageChain chain = Uniform({1, 1}, {2, 2}, 2);
  auto gpipe = PlanStages(chain, StageDevices(2), 4, PipelineSchedule::kGPipe);
  ASSERT_TRUE(gpipe.ok()) << gpipe.status().ToString();
  EXPECT_EQ(gpipe->first_item, (std::vector<int>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(gpipe->predicted_step_s, 15);
  // 1F1B: the same (M + K - 1) x (F + B) bubble, 15, with stage 0 holding 2 micro-batches, not 4.
  auto one = PlanStages(chain, StageDevices(2), 4, PipelineSchedule::k1F1B);
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->predicted_step_s, 15);
  EXPECT_EQ(one->in_flight, (std::vector<int>{2, 1}));
  EXPECT_EQ(gpipe->in_flight, (std::vector<int>{4, 4}));
  EXPECT_DOUBLE_EQ(one->ideal_step_s, 12);
  // A transfer of 0.5 each way between the stages. 1F1B's stage 1: F0 1.5-2.5, B0 -4.5, F1
  // -5.5, B1 -7.5, F2 8.5-9.5, B2 -11.5, F3 11.5-12.5, B3 -14.5; stage 0's last backward waits
  // for that until 15 and ends at 17.
  auto late = PlanStages(chain, StageDevices(2, 1e12, 0.5), 4, PipelineSchedule::k1F1B);
  ASSERT_TRUE(late.ok());
  EXPECT_DOUBLE_EQ(late->predicted_step_s, 17);
  // Updates end the step on their stage.
  chain.update_s[0] = {3, 3};
  auto updated = PlanStages(chain, StageDevices(2), 4, PipelineSchedule::k1F1B);
  ASSERT_TRUE(updated.ok());
  EXPECT_DOUBLE_EQ(updated->predicted_step_s, 18);
}

TEST(PipelineStagesTest, TheChosenCutHasTheFastestSlowestStage) {
  const std::vector<double> times = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  StageChain chain = Uniform(times, std::vector<double>(times.size(), 0), 3);
  auto plan = PlanStages(chain, StageDevices(3), 8, PipelineSchedule::k1F1B);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Every cut into three non-empty runs, by brute force.
  double best = std::numeric_limits<double>::infinity();
  const int n = static_cast<int>(times.size());
  for (int a = 1; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      double s0 = 0, s1 = 0, s2 = 0;
      for (int i = 0; i < n; ++i) (i < a ? s0 : i < b ? s1 : s2) += times[i];
      best = std::min(best, std::max({s0, s1, s2}));
    }
  }
  double slowest = 0;
  for (int s = 0; s < 3; ++s) slowest = std::max(slowest, plan->forward_s[s]);
  EXPECT_DOUBLE_EQ(slowest, best);
  EXPECT_EQ(plan->stages(), 3);
  EXPECT_EQ(plan->StageOf(0), 0);
  EXPECT_EQ(plan->StageOf(n - 1), 2);
}

TEST(PipelineStagesTest, MemoryLimitsMoveTheCut) {
  // Four equal items; item 0 holds 60 bytes of variables, each item 10 bytes of activations
  // per micro-batch. The balanced cut (2 + 2) puts 60 + 2 x 20 = 100 bytes on stage 0 under
  // 1F1B with two stages: over a limit of 90, so stage 0 gets item 0 alone (60 + 2 x 10 = 80).
  StageChain chain = Uniform({1, 1, 1, 1}, {1, 1, 1, 1}, 2);
  chain.persistent_bytes[0] = 60;
  chain.activation_bytes = {10, 10, 10, 10};
  auto free = PlanStages(chain, StageDevices(2), 4, PipelineSchedule::k1F1B);
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(free->first_item[1], 2);
  EXPECT_DOUBLE_EQ(free->peak_bytes[0], 100);
  auto tight = PlanStages(chain, StageDevices(2, 90), 4, PipelineSchedule::k1F1B);
  ASSERT_TRUE(tight.ok()) << tight.status().ToString();
  EXPECT_EQ(tight->first_item[1], 1);
  EXPECT_DOUBLE_EQ(tight->peak_bytes[0], 80);
  EXPECT_DOUBLE_EQ(tight->peak_bytes[1], 30);  // one micro-batch in flight on the last stage
  // GPipe holds all 4 micro-batches: 60 + 4 x 10 = 100 > 90 for any cut.
  auto gpipe = PlanStages(chain, StageDevices(2, 90), 4, PipelineSchedule::kGPipe);
  ASSERT_FALSE(gpipe.ok());
  EXPECT_EQ(gpipe.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(MessageHas(gpipe.status(), {"stage 0 on cpu:0"}));
  EXPECT_TRUE(MessageHas(gpipe.status(), {"'n0'"}));
  // A cut given that does not fit names its stage.
  auto given = PlanStages(chain, StageDevices(2, 90), 4, PipelineSchedule::k1F1B, {3});
  ASSERT_FALSE(given.ok());
  EXPECT_TRUE(MessageHas(given.status(), {"split points given"}));
  EXPECT_TRUE(MessageHas(given.status(), {"'n0' to 'n2'"}));
}

TEST(PipelineStagesTest, BadRequestsAreRefused) {
  StageChain chain = Uniform({1, 1}, {1, 1}, 3);
  auto few = PlanStages(chain, StageDevices(3), 2, PipelineSchedule::k1F1B);
  ASSERT_FALSE(few.ok());
  EXPECT_TRUE(MessageHas(few.status(), {"3 stages need at least 3 forward nodes"}));
  StageChain two = Uniform({1, 1, 1}, {1, 1, 1}, 2);
  EXPECT_FALSE(PlanStages(two, StageDevices(2), 0, PipelineSchedule::k1F1B).ok());
  auto order = PlanStages(two, StageDevices(2), 2, PipelineSchedule::k1F1B, {0});
  ASSERT_FALSE(order.ok());
  EXPECT_TRUE(MessageHas(order.status(), {"'n0'"}));
  auto count = PlanStages(two, StageDevices(2), 2, PipelineSchedule::k1F1B, {1, 2});
  ASSERT_FALSE(count.ok());
  EXPECT_TRUE(MessageHas(count.status(), {"2 stages need 1 split points"}));
}

}  // namespace
}  // namespace dflow
