// Calibration of the virtual CPU devices: measured figures, in plausible ranges, cached.
#include "runtime/calibration.h"

#include <gtest/gtest.h>

namespace dflow {
namespace {

TEST(CalibrationTest, MeasuresPlausibleFiguresOnceAndAppliesThem) {
  auto c = CachedCpuCalibration(1);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Wide ranges: any CPU this runs on, sanitizers included.
  EXPECT_GT(c->peak_flops, 1e7);
  EXPECT_LT(c->peak_flops, 1e13);
  EXPECT_GT(c->memory_bandwidth, 1e8);
  EXPECT_LT(c->memory_bandwidth, 1e12);
  EXPECT_GT(c->launch_overhead_s, 1e-9);
  EXPECT_LT(c->launch_overhead_s, 1e-2);
  EXPECT_GT(c->same_process.latency_s, 0);
  EXPECT_GT(c->same_process.bandwidth, 0);
  EXPECT_GT(c->seconds_taken, 0);
  // Cached: the same figures again, not a new measurement.
  auto again = CachedCpuCalibration(1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->peak_flops, c->peak_flops);
  EXPECT_EQ(again->same_process.latency_s, c->same_process.latency_s);

  DeviceSpec spec;
  spec.memory_bytes = 123;
  DeviceSpec applied = c->Apply(spec);
  EXPECT_EQ(applied.memory_bytes, 123);
  EXPECT_EQ(applied.peak_flops, c->peak_flops);
  EXPECT_EQ(applied.launch_overhead_s, c->launch_overhead_s);

  auto bad = CalibrateCpu(0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflow
