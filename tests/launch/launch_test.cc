// Workers started by the cluster engines users run find their master with no cluster file: a
// real one-node Slurm (srun), a real Open MPI mpirun, and torchrun-style variables. In each, the
// master is the data-parallel MLP example at --rendezvous, which trains across the two workers
// and fails unless the loss stays within 1e-2 of the single replica it trains beside them (the
// one-process result); the workers must say which launcher and rank they came with, and leave
// when the master is done (the launcher's step ends).
//
// Needs root, Slurm, munge and Open MPI (scripts/setup.sh installs them). Where they are missing
// the tests skip, unless DFLOW_REQUIRE_LAUNCHERS=1 (scripts/test.sh sets it): then they fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <future>

#include "distributed/local_worker.h"
#include "launch/local_slurm.h"
#include "tools/subprocess.h"

namespace dflow::testing {
namespace {

constexpr char kToken[] = "launch-test-token";

bool Required() {
  const char* v = std::getenv("DFLOW_REQUIRE_LAUNCHERS");
  return v != nullptr && std::string(v) == "1";
}

#define SKIP_OR_FAIL(why)                                              \
  do {                                                                 \
    if (Required()) FAIL() << (why) << " (DFLOW_REQUIRE_LAUNCHERS=1)"; \
    GTEST_SKIP() << (why);                                             \
  } while (0)

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = distributed::WriteTokenFile(::testing::TempDir(), kToken);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    token_file_ = *file;
    port_ = std::to_string(FreePort());
  }
  void TearDown() override { std::remove(token_file_.c_str()); }

  // The master, in a thread: trains across the workers that join at `listen`.
  std::future<Result<tools::ProgramResult>> StartMaster(const std::string& listen) {
    std::vector<std::string> argv = {DFLOW_DATA_PARALLEL_BINARY,
                                     "--rendezvous",
                                     listen,
                                     "--token-file",
                                     token_file_,
                                     "--steps",
                                     "30",
                                     "--rendezvous-timeout",
                                     "60"};
    return std::async(std::launch::async,
                      [argv]() { return tools::RunProgram(argv, "", /*merge_stderr=*/true); });
  }
  // The worker's flags after its binary.
  std::vector<std::string> WorkerFlags(const std::vector<std::string>& master) const {
    std::vector<std::string> flags = {DFLOW_WORKER_BINARY};
    flags.insert(flags.end(), master.begin(), master.end());
    for (const char* f : {"--threads", "1", "--join-timeout", "60", "--token-file"}) {
      flags.push_back(f);
    }
    flags.push_back(token_file_);
    return flags;
  }
  // The master trained across two workers of `launcher` to the single replica's loss.
  static void ExpectTrained(std::future<Result<tools::ProgramResult>>& master,
                            const std::string& launcher) {
    auto ran = master.get();
    ASSERT_TRUE(ran.ok()) << ran.status().ToString();
    EXPECT_EQ(ran->exit_code, 0) << ran->out;
    for (const std::string& line : std::vector<std::string>{
             "rank 0 at 127.0.0.1:", "rank 1 at 127.0.0.1:", "(" + launcher + ") joined",
             "worker:0/cpu:0", "worker:1/cpu:0",
             "largest relative loss difference over 30 steps"}) {
      EXPECT_NE(ran->out.find(line), std::string::npos) << "no '" << line << "' in\n" << ran->out;
    }
  }
  static void ExpectWorkersLeft(const tools::ProgramResult& launched, const std::string& launcher) {
    EXPECT_EQ(launched.exit_code, 0) << launched.out;
    for (const std::string& line :
         std::vector<std::string>{"rank 0 of 2 (" + launcher, "rank 1 of 2 (" + launcher,
                                  "as /job:worker/task:0 (2 workers)",
                                  "as /job:worker/task:1 (2 workers)", "has gone; exiting"}) {
      EXPECT_NE(launched.out.find(line), std::string::npos) << "no '" << line << "' in\n"
                                                            << launched.out;
    }
  }

  std::string token_file_;
  std::string port_;
};

TEST_F(LaunchTest, SrunStartsWorkersThatFindTheMasterOnTheStepsFirstHost) {
  auto slurm = LocalSlurm::Start();
  if (!slurm.ok()) SKIP_OR_FAIL(slurm.status().ToString());
  auto master = StartMaster("localhost:" + port_);
  // No master address: the first host of the step (localhost) at --master-port.
  std::vector<std::string> argv = {"srun", "-n", "2", "--time=2"};
  for (auto& f : WorkerFlags({"--master", "auto", "--master-port", port_})) argv.push_back(f);
  auto srun = tools::RunProgram(argv, "", true);
  ASSERT_TRUE(srun.ok()) << srun.status().ToString();
  ExpectTrained(master, "Slurm");
  ExpectWorkersLeft(*srun, "Slurm");
  EXPECT_NE(srun->out.find("(from the first host of SLURM_STEP_NODELIST)"), std::string::npos)
      << srun->out;
  EXPECT_NE(srun->out.find("Slurm job "), std::string::npos) << srun->out;
}

TEST_F(LaunchTest, MpirunStartsWorkersThatJoinTheMaster) {
  if (!tools::FindProgram("mpirun")) SKIP_OR_FAIL("mpirun is not installed (openmpi-bin)");
  auto master = StartMaster("127.0.0.1:" + port_);
  std::vector<std::string> argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2"};
  for (auto& f : WorkerFlags({"--master", "127.0.0.1:" + port_})) argv.push_back(f);
  auto mpirun = tools::RunProgram(argv, "", true);
  ASSERT_TRUE(mpirun.ok()) << mpirun.status().ToString();
  ExpectTrained(master, "Open MPI");
  ExpectWorkersLeft(*mpirun, "Open MPI");
}

TEST_F(LaunchTest, TorchrunStyleVariablesLeadWorkersToTheMaster) {
  auto master = StartMaster("127.0.0.1:" + port_);
  std::vector<std::future<Result<tools::ProgramResult>>> workers;
  for (const char* rank : {"1", "0"}) {
    std::vector<std::string> argv = {"env",
                                     std::string("RANK=") + rank,
                                     "WORLD_SIZE=2",
                                     std::string("LOCAL_RANK=") + rank,
                                     "MASTER_ADDR=127.0.0.1",
                                     "MASTER_PORT=" + port_};
    for (auto& f : WorkerFlags({})) argv.push_back(f);
    workers.push_back(
        std::async(std::launch::async, [argv]() { return tools::RunProgram(argv, "", true); }));
  }
  ExpectTrained(master, "torchrun-style");
  tools::ProgramResult both;
  for (auto& w : workers) {
    auto ran = w.get();
    ASSERT_TRUE(ran.ok()) << ran.status().ToString();
    EXPECT_EQ(ran->exit_code, 0) << ran->out;
    both.out += ran->out;
  }
  both.exit_code = 0;
  ExpectWorkersLeft(both, "torchrun-style");
  EXPECT_NE(both.out.find("(from MASTER_ADDR and MASTER_PORT)"), std::string::npos) << both.out;
}

}  // namespace
}  // namespace dflow::testing
