// dflow-launch: finds dflow-worker beside itself when started from PATH in another folder,
// restarts a dead worker after a pause that doubles, kills and restarts a hung one (a stopped
// process sends no heartbeat), and past its restart cap says so and exits with status 1.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "distributed/cluster_spec.h"
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"

namespace dflow::distributed {
namespace {

constexpr char kLaunchToken[] = "dflow-launch-test-token";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// dflow-launch started as a user would from a shell: by name from PATH, in a folder without
// dflow-worker; its stderr in a log file.
class Launcher {
 public:
  explicit Launcher(std::vector<std::string> flags) {
    dir_ = ::testing::TempDir() + "/dflow_launch_" + std::to_string(getpid()) + "_" +
           std::to_string(counter_++);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    log_ = dir_ + "/launch.err";
    spec_ = dir_ + "/cluster.json";
    auto token = WriteTokenFile(dir_, kLaunchToken);
    EXPECT_TRUE(token.ok());
    const std::string bin = std::filesystem::path(DFLOW_LAUNCH_BINARY).parent_path().string();
    std::vector<std::string> argv = {"dflow-launch", "--token-file", *token, "--cluster-out",
                                     spec_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* f : {"--", "--threads", "1"}) argv.push_back(f);
    pid_ = fork();
    if (pid_ == 0) {
      if (chdir(dir_.c_str()) != 0) std::_Exit(126);
      setenv("PATH", (bin + ":/usr/bin:/bin").c_str(), 1);
      freopen("/dev/null", "w", stdout);
      freopen(log_.c_str(), "w", stderr);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp("dflow-launch", args.data());
      std::_Exit(127);
    }
  }
  ~Launcher() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  // Waits (at most `seconds`) for `text` in the log; whether it came.
  bool WaitFor(const std::string& text, double seconds = 20) {
    for (int i = 0; i < seconds * 20; ++i) {
      if (ReadAll(log_).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The pid of the worker's latest start, from the log.
  pid_t WorkerPid(int worker) const {
    std::istringstream in(ReadAll(log_));
    std::string line;
    pid_t pid = -1;
    const std::string prefix = "dflow-launch: worker " + std::to_string(worker) + " (pid ";
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) == 0) pid = std::stoi(line.substr(prefix.size()));
    }
    return pid;
  }
  // Its exit status once it ends (at most `seconds`); nullopt while it runs.
  std::optional<int> Wait(double seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::nullopt;
  }
  std::string log() const { return ReadAll(log_); }
  const std::string& spec() const { return spec_; }

 private:
  static inline int counter_ = 0;
  std::string dir_, log_, spec_;
  pid_t pid_ = -1;
};

// The worker at the spec's first address runs a step.
void ExpectServes(const std::string& spec) {
  auto loaded = ClusterSpec::Load(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root.WithOpName("x"), Tensor::FromVector<float>({3.f}, Shape{1}));
  (void)ops::Mul(root.WithOpName("y").WithDevice("/job:worker/task:0/device:CPU:0"), x, x);
  DistributedOptions options;
  options.cluster = *loaded;
  options.token = kLaunchToken;
  auto session = DistributedSession::Create(root.graph(), SessionOptions{}, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {"y:0"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).flat<float>()[0], 9.f);
}

TEST(DflowLaunchTest, FindsItsWorkerFromPathAndRestartsAHungOne) {
  Launcher launch({"-n", "1", "--hang-timeout", "1"});
  ASSERT_TRUE(launch.WaitFor("dflow-launch: worker 0 (pid ")) << launch.log();
  for (int i = 0; i < 100 && !std::filesystem::exists(launch.spec()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectServes(launch.spec()));
  const pid_t first = launch.WorkerPid(0);
  ASSERT_GT(first, 0);
  kill(first, SIGSTOP);  // alive, but silent
  ASSERT_TRUE(launch.WaitFor("sent no heartbeat for")) << launch.log();
  ASSERT_TRUE(launch.WaitFor("hung; restarting it in 0.5 s (1 of 10)")) << launch.log();
  ASSERT_TRUE(launch.WaitFor("back at")) << launch.log();
  EXPECT_NE(launch.WorkerPid(0), first);
  ASSERT_NO_FATAL_FAILURE(ExpectServes(launch.spec()));
}

TEST(DflowLaunchTest, PausesLongerWithEachRestartAndGivesUpPastItsCap) {
  Launcher launch({"-n", "1", "--max-restarts", "2"});
  ASSERT_TRUE(launch.WaitFor("dflow-launch: worker 0 (pid ")) << launch.log();
  for (const char* expected :
       {"restarting it in 0.5 s (1 of 2)", "restarting it in 1.0 s (2 of 2)"}) {
    const pid_t pid = launch.WorkerPid(0);
    ASSERT_GT(pid, 0);
    kill(pid, SIGKILL);
    ASSERT_TRUE(launch.WaitFor(expected)) << launch.log();
    ASSERT_TRUE(launch.WaitFor("(pid " + std::to_string(pid) + ")") && launch.WaitFor("back at"))
        << launch.log();
    // The next kill must hit the restarted worker.
    for (int i = 0; i < 100 && launch.WorkerPid(0) == pid; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  kill(launch.WorkerPid(0), SIGKILL);
  auto status = launch.Wait(10);
  ASSERT_TRUE(status.has_value()) << launch.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << *status;
  EXPECT_NE(launch.log().find("worker 0 at 127.0.0.1:"), std::string::npos) << launch.log();
  EXPECT_NE(launch.log().find("killed by signal 9 after 2 restarts (--max-restarts 2); giving up"),
            std::string::npos)
      << launch.log();
}

}  // namespace
}  // namespace dflow::distributed
