// TaskNames against hand-written renamings: a master's names for its workers and theirs.
#include "distributed/task_names.h"

#include <gtest/gtest.h>

#include "status_matchers.h"

namespace dflow::distributed {
namespace {

using testing::MessageHas;

TEST(TaskNamesTest, SwappedNamesTranslateBothWaysAtOnce) {
  TaskNames names;
  ASSERT_TRUE(names.Add("/job:worker/task:0", "/job:worker/task:1").ok());
  ASSERT_TRUE(names.Add("/job:worker/task:1", "/job:worker/task:0").ok());
  ASSERT_TRUE(names.Add("/job:worker/task:2", "/job:worker/task:12").ok());
  EXPECT_TRUE(names.renamed());
  EXPECT_EQ(names.Theirs("/job:worker/task:0"), "/job:worker/task:1");
  EXPECT_EQ(names.Mine("/job:worker/task:12"), "/job:worker/task:2");
  EXPECT_EQ(names.Mine("/job:ps/task:0"), "/job:ps/task:0");  // unknown: unchanged
  EXPECT_EQ(names.TheirDevice("/job:worker/task:1/device:CPU:0"),
            "/job:worker/task:0/device:CPU:0");
  EXPECT_EQ(names.MyDevice("/job:worker/task:12/device:GPU:1"), "/job:worker/task:2/device:GPU:1");
  EXPECT_EQ(names.MyDevice("/job:worker/task:0"), "/job:worker/task:1");
  // Every name at once: swapped names stay swapped; task:1 is not a prefix of task:12.
  EXPECT_EQ(names.MyText("node 'a' on /job:worker/task:1/device:CPU:0 sent to "
                         "/job:worker/task:0/device:CPU:0 via /job:worker/task:12; /job:x, /job:"),
            "node 'a' on /job:worker/task:0/device:CPU:0 sent to "
            "/job:worker/task:1/device:CPU:0 via /job:worker/task:2; /job:x, /job:");
  Status s = names.MyStatus(Unavailable("lost /job:worker/task:0"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "lost /job:worker/task:1");
}

TEST(TaskNamesTest, OneMastersNamesAreTheWorkersOwn) {
  TaskNames names;
  ASSERT_TRUE(names.Add("/job:worker/task:0", "/job:worker/task:0").ok());
  EXPECT_FALSE(names.renamed());
  EXPECT_EQ(names.MyText("on /job:worker/task:0"), "on /job:worker/task:0");
}

TEST(TaskNamesTest, TwoTasksAnsweringToOneNameAreRefusedNamingBoth) {
  TaskNames names;
  ASSERT_TRUE(names.Add("/job:worker/task:0", "/job:worker/task:0").ok());
  Status s = names.Add("/job:worker/task:1", "/job:worker/task:0");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(s, {"/job:worker/task:0", "/job:worker/task:1", "restart"}))
      << s.ToString();
}

}  // namespace
}  // namespace dflow::distributed
