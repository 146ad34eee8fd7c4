#include "graph/device_name.h"

#include <gtest/gtest.h>

namespace dflow {
namespace {

DeviceName P(const std::string& s) {
  auto r = DeviceName::Parse(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
  return r.ok() ? *r : DeviceName{};
}

TEST(DeviceNameTest, ParsesCanonicalForm) {
  DeviceName d = P("/job:worker/task:1/device:GPU:0");
  EXPECT_EQ(d.job, "worker");
  EXPECT_EQ(d.task, 1);
  EXPECT_EQ(d.type, "GPU");
  EXPECT_EQ(d.index, 0);
  EXPECT_TRUE(d.fully_specified());
  EXPECT_EQ(d.ToString(), "/job:worker/task:1/device:GPU:0");
  EXPECT_EQ(d.ShortString(), "worker:1/gpu:0");
}

TEST(DeviceNameTest, ParsesShortForms) {
  EXPECT_EQ(P("gpu:0").ToString(), "/device:GPU:0");
  EXPECT_EQ(P("cpu:1").ToString(), "/device:CPU:1");
  EXPECT_EQ(P("CPU:1"), P("cpu:1"));
  EXPECT_EQ(P("worker:1/gpu:0").ToString(), "/job:worker/task:1/device:GPU:0");
  EXPECT_EQ(P("ps/cpu").ToString(), "/job:ps/device:CPU:*");
  EXPECT_EQ(P("/job:a/cpu:3").ToString(), "/job:a/device:CPU:3");
}

TEST(DeviceNameTest, PartialSpecsMatch) {
  DeviceName any_gpu = P("gpu");
  EXPECT_FALSE(any_gpu.index.has_value());
  EXPECT_EQ(any_gpu.ToString(), "/device:GPU:*");
  DeviceName full = P("/job:localhost/task:0/device:GPU:3");
  EXPECT_TRUE(any_gpu.Matches(full));
  EXPECT_FALSE(P("cpu").Matches(full));
  EXPECT_TRUE(P("").Matches(full));
  EXPECT_TRUE(P("").empty());
  EXPECT_TRUE(P("/job:localhost").Matches(full));
  EXPECT_FALSE(P("worker:1/gpu:3").Matches(full));
  EXPECT_EQ(P("gpu:2").WithDefaults().ToString(), "/job:localhost/task:0/device:GPU:2");
}

TEST(DeviceNameTest, MalformedNamesAreErrorsThatQuoteTheName) {
  for (const char* bad :
       {"tpu:0", "gpu:x", "gpu:-1", "/job:w/task:z", "/job:w/gpu:0/cpu:0", "a/b/c",
        "gpu:0/worker:1", "/bogus:1", "gpu:0:1", "/job:/cpu:0", "1worker:0/cpu:0"}) {
    auto r = DeviceName::Parse(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(DeviceNameTest, AddedTypesParseLikeCpuAndGpu) {
  EXPECT_EQ(DeviceName::Parse("npu:1").status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(DeviceName::AddType("NPU").ok());
  auto npu = DeviceName::Parse("npu:1");
  ASSERT_TRUE(npu.ok()) << npu.status().ToString();
  EXPECT_EQ(npu->type, "NPU");
  EXPECT_EQ(npu->ShortString(), "npu:1");
  EXPECT_EQ(DeviceName::Parse("/job:w/task:0/device:NPU:2")->ToString(),
            "/job:w/task:0/device:NPU:2");
  EXPECT_EQ(DeviceName::Parse("worker:1/npu:0")->job, "worker");
  // Still an error, now naming every known type.
  auto bad = DeviceName::Parse("tpu:0");
  EXPECT_NE(bad.status().message().find("CPU, GPU or NPU"), std::string::npos)
      << bad.status().message();
  for (const char* type : {"npu", "N", "NPU1", "TOOLONGTYPE", ""}) {
    Status s = DeviceName::AddType(type);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << type;
    EXPECT_NE(s.message().find(std::string("'") + type + "'"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(DeviceName::AddType("GPU").ok());  // known already: nothing changes
}

}  // namespace
}  // namespace dflow
