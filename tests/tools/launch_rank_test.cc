// tools::LaunchRankFromEnvironment and PortForRank: the rank a launcher gives a worker, and the
// port it then listens on.
#include "tools/launch_rank.h"

#include <gtest/gtest.h>

#include <map>

#include "test_util.h"

namespace dflow::tools {
namespace {

using testing::MessageHas;

// A fake environment.
auto Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchRankTest, ReadsOpenMpiSlurmAndPmix) {
  auto none = LaunchRankFromEnvironment(Env({}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto ompi = LaunchRankFromEnvironment(
      Env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(ompi.ok() && ompi->has_value());
  EXPECT_EQ((*ompi)->rank, 3);
  EXPECT_EQ((*ompi)->world_size, 4);
  EXPECT_EQ((*ompi)->source, "Open MPI");  // first, when both are set
  auto slurm = LaunchRankFromEnvironment(Env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  ASSERT_TRUE(slurm.ok() && slurm->has_value());
  EXPECT_EQ((*slurm)->rank, 1);
  EXPECT_EQ((*slurm)->source, "Slurm");
  auto pmix = LaunchRankFromEnvironment(Env({{"PMIX_RANK", "0"}}));
  ASSERT_TRUE(pmix.ok() && pmix->has_value());
  EXPECT_EQ((*pmix)->world_size, 1);
}

TEST(LaunchRankTest, BadValuesNameTheVariable) {
  auto word = LaunchRankFromEnvironment(Env({{"SLURM_PROCID", "one"}}));
  EXPECT_EQ(word.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(word.status(), {"SLURM_PROCID='one'"})) << word.status().ToString();
  auto past = LaunchRankFromEnvironment(
      Env({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_TRUE(MessageHas(past.status(), {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"}))
      << past.status().ToString();
  auto negative = LaunchRankFromEnvironment(Env({{"PMIX_RANK", "-1"}}));
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
}

TEST(LaunchRankTest, PortPlusRank) {
  EXPECT_EQ(PortForRank("127.0.0.1:7000", 3).value(), "127.0.0.1:7003");
  EXPECT_EQ(PortForRank("[::1]:7000", 1).value(), "[::1]:7001");
  EXPECT_EQ(PortForRank("127.0.0.1:0", 5).value(), "127.0.0.1:0");  // any free port
  EXPECT_TRUE(MessageHas(PortForRank("127.0.0.1:65535", 1).status(), {"past port 65535"}));
  EXPECT_TRUE(MessageHas(PortForRank("localhost", 1).status(), {"'localhost' has no port"}));
  EXPECT_TRUE(MessageHas(PortForRank("h:x1", 1).status(), {"'h:x1' has no port number"}));
}

}  // namespace
}  // namespace dflow::tools
