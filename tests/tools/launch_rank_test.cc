// tools::LaunchRankFromEnvironment, MasterFromEnvironment and PortForRank: the rank a launcher
// gives a worker, where its master is, and the port it then listens on.
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
  EXPECT_EQ((*slurm)->local_rank, -1);  // SLURM_LOCALID not set
  auto pmix = LaunchRankFromEnvironment(Env({{"PMIX_RANK", "0"}}));
  ASSERT_TRUE(pmix.ok() && pmix->has_value());
  EXPECT_EQ((*pmix)->world_size, 0);  // not said
}

TEST(LaunchRankTest, ReadsLocalRanksJobIdsTorchrunAndKubernetes) {
  auto slurm = LaunchRankFromEnvironment(Env({{"SLURM_PROCID", "5"},
                                              {"SLURM_NTASKS", "8"},
                                              {"SLURM_LOCALID", "1"},
                                              {"SLURM_JOB_ID", "4242"}}));
  ASSERT_TRUE(slurm.ok() && slurm->has_value());
  EXPECT_EQ((*slurm)->rank, 5);
  EXPECT_EQ((*slurm)->world_size, 8);
  EXPECT_EQ((*slurm)->local_rank, 1);
  EXPECT_EQ((*slurm)->job_id, "4242");
  auto ompi = LaunchRankFromEnvironment(Env({{"OMPI_COMM_WORLD_RANK", "2"},
                                             {"OMPI_COMM_WORLD_SIZE", "4"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}));
  ASSERT_TRUE(ompi.ok() && ompi->has_value());
  EXPECT_EQ((*ompi)->local_rank, 0);
  // torchrun inside an sbatch script: the batch's SLURM_PROCID=0 is inherited, RANK is its own.
  auto torchrun = LaunchRankFromEnvironment(Env({{"RANK", "3"},
                                                 {"WORLD_SIZE", "4"},
                                                 {"LOCAL_RANK", "1"},
                                                 {"SLURM_PROCID", "0"},
                                                 {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(torchrun.ok() && torchrun->has_value());
  EXPECT_EQ((*torchrun)->source, "torchrun-style");
  EXPECT_EQ((*torchrun)->rank, 3);
  EXPECT_EQ((*torchrun)->world_size, 4);
  EXPECT_EQ((*torchrun)->local_rank, 1);
  auto indexed =
      LaunchRankFromEnvironment(Env({{"JOB_COMPLETION_INDEX", "2"}, {"WORLD_SIZE", "3"}}));
  ASSERT_TRUE(indexed.ok() && indexed->has_value());
  EXPECT_EQ((*indexed)->source, "Kubernetes");
  EXPECT_EQ((*indexed)->rank, 2);
  EXPECT_EQ((*indexed)->world_size, 3);
  auto past = LaunchRankFromEnvironment(Env({{"JOB_COMPLETION_INDEX", "3"}, {"WORLD_SIZE", "3"}}));
  EXPECT_TRUE(MessageHas(past.status(), {"JOB_COMPLETION_INDEX=3", "WORLD_SIZE=3"}))
      << past.status().ToString();
  auto local = LaunchRankFromEnvironment(Env({{"RANK", "0"}, {"LOCAL_RANK", "x"}}));
  EXPECT_TRUE(MessageHas(local.status(), {"LOCAL_RANK='x'"})) << local.status().ToString();
}

TEST(LaunchRankTest, FirstHostOfSlurmHostLists) {
  EXPECT_EQ(FirstHostOfList("node7").value(), "node7");
  EXPECT_EQ(FirstHostOfList("node7,node9").value(), "node7");
  EXPECT_EQ(FirstHostOfList("node[03-05,9],login1").value(), "node03");
  EXPECT_EQ(FirstHostOfList("gpu[12,4-6]").value(), "gpu12");
  EXPECT_EQ(FirstHostOfList("rack[1-2]-n[4-5]").value(), "rack1-n4");
  EXPECT_TRUE(MessageHas(FirstHostOfList("node[1-2").status(), {"'node[1-2'", "unbalanced"}));
  EXPECT_TRUE(MessageHas(FirstHostOfList("").status(), {"names no host"}));
}

TEST(LaunchRankTest, MasterFromTorchrunVariablesOrTheSlurmStep) {
  auto none = MasterFromEnvironment(29500, Env({{"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto torchrun = MasterFromEnvironment(29500, Env({{"MASTER_ADDR", "10.1.2.3"},
                                                    {"MASTER_PORT", "7777"},
                                                    {"SLURM_STEP_NODELIST", "n[1-4]"}}));
  ASSERT_TRUE(torchrun.ok() && torchrun->has_value());
  EXPECT_EQ((*torchrun)->address, "10.1.2.3:7777");
  EXPECT_EQ((*torchrun)->source, "MASTER_ADDR and MASTER_PORT");
  auto addr_only = MasterFromEnvironment(29501, Env({{"MASTER_ADDR", "fe80::1"}}));
  ASSERT_TRUE(addr_only.ok() && addr_only->has_value());
  EXPECT_EQ((*addr_only)->address, "[fe80::1]:29501");
  auto slurm = MasterFromEnvironment(
      29500, Env({{"SLURM_STEP_NODELIST", "n[08-11]"}, {"SLURM_JOB_NODELIST", "n[01-11]"}}));
  ASSERT_TRUE(slurm.ok() && slurm->has_value());
  EXPECT_EQ((*slurm)->address, "n08:29500");
  EXPECT_EQ((*slurm)->source, "the first host of SLURM_STEP_NODELIST");
  auto job = MasterFromEnvironment(29500, Env({{"SLURM_JOB_NODELIST", "a,b"}}));
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->address, "a:29500");
  EXPECT_TRUE(MessageHas(
      MasterFromEnvironment(1, Env({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}})).status(),
      {"MASTER_PORT=0"}));
  EXPECT_TRUE(MessageHas(MasterFromEnvironment(1, Env({{"SLURM_STEP_NODELIST", "n[1"}})).status(),
                         {"SLURM_STEP_NODELIST", "unbalanced"}));
}

TEST(LocalHostTowardTest, TheInterfaceThatReachesTheAddress) {
  EXPECT_EQ(LocalHostToward("127.0.0.1:29500").value(), "127.0.0.1");
  const std::string local = LocalHostToward("localhost:1").value();
  EXPECT_TRUE(local == "127.0.0.1" || local == "[::1]") << local;
  auto unknown = LocalHostToward("no-such-host.invalid:1");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(unknown.status(), {"no-such-host.invalid"}));
  EXPECT_EQ(LocalHostToward("nonsense").status().code(), StatusCode::kInvalidArgument);
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
