// TaskCache (transport/task_cache.h): the same answers as TaskOfDevice, before and after it
// fills up and starts again.
#include "transport/task_cache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace dflow::transport {
namespace {

TEST(TaskCacheTest, AnswersAsTaskOfDeviceDoesPastItsBound) {
  TaskCache cache;
  for (int round = 0; round < 2; ++round) {  // the second from the cache
    for (int i = 0; i < 3 * static_cast<int>(TaskCache::kMaxEntries); i += 7) {
      const std::string device = fmt::format("/job:worker/task:{}/device:CPU:0", i);
      auto got = cache.TaskOf(device);
      auto want = TaskOfDevice(device);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, *want);
    }
  }
  auto bad = cache.TaskOf("not a device");
  auto want = TaskOfDevice("not a device");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().ToString(), want.status().ToString());
}

}  // namespace
}  // namespace dflow::transport
