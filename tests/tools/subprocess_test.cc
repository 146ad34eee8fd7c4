// tools::RunProgram and FindProgram: arguments reach the program as they are, the pipes never
// stall, and a missing or failing program is reported.
#include "tools/subprocess.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace dflow::tools {
namespace {

using testing::MessageHas;

TEST(SubprocessTest, ArgumentsAreNotInterpreted) {
  auto ran = RunProgram({"echo", "$(touch x)", "`y`", "a b", "'c'", ";d"}, "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0);
  EXPECT_EQ(ran->out, "$(touch x) `y` a b 'c' ;d\n");
}

TEST(SubprocessTest, LargeInputAndOutputDoNotStall) {
  // More than any pipe buffer both ways: writing all input before reading would deadlock.
  std::string input(8 << 20, 'x');
  for (size_t i = 0; i < input.size(); i += 97) input[i] = '\n';
  auto ran = RunProgram({"cat"}, input);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0);
  EXPECT_EQ(ran->out.size(), input.size());
  EXPECT_TRUE(ran->out == input);
}

TEST(SubprocessTest, AProgramThatReadsNothingDoesNotKillTheCaller) {
  // `true` exits without reading: the writes get EPIPE, not a SIGPIPE that ends this test.
  auto ran = RunProgram({"true"}, std::string(4 << 20, 'x'));
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0);
}

TEST(SubprocessTest, ExitStatusAndStderr) {
  auto ran = RunProgram({"ls", "/nonexistent_dflow_dir"}, "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_NE(ran->exit_code, 0);
  EXPECT_EQ(ran->signal, 0);
  EXPECT_TRUE(ran->out.empty());
  EXPECT_NE(ran->err.find("nonexistent_dflow_dir"), std::string::npos) << ran->err;
  auto merged = RunProgram({"ls", "/nonexistent_dflow_dir"}, "", /*merge_stderr=*/true);
  ASSERT_TRUE(merged.ok());
  EXPECT_NE(merged->out.find("nonexistent_dflow_dir"), std::string::npos) << merged->out;
  EXPECT_TRUE(merged->err.empty());
}

TEST(SubprocessTest, MissingProgramIsNotFoundNamingIt) {
  auto ran = RunProgram({"dflow_no_such_program"}, "");
  EXPECT_EQ(ran.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(ran.status(), {"'dflow_no_such_program'", "PATH"}));
}

TEST(SubprocessTest, FindProgramSearchesTheGivenPath) {
  EXPECT_EQ(FindProgram("sh", "/nonexistent_dflow_dir:/bin"), "/bin/sh");
  EXPECT_EQ(FindProgram("sh", "/nonexistent_dflow_dir"), std::nullopt);
  EXPECT_EQ(FindProgram("/bin/sh"), "/bin/sh");
  EXPECT_EQ(FindProgram("/nonexistent_dflow_dir/sh"), std::nullopt);
  EXPECT_EQ(FindProgram("passwd", "/etc"), std::nullopt);  // a file, but not executable
  EXPECT_EQ(FindProgram(""), std::nullopt);
}

}  // namespace
}  // namespace dflow::tools
