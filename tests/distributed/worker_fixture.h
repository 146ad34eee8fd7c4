// What the distributed tests share: dflow-worker child processes on loopback and the cluster of
// them. The worker is the dflow-worker beside the test binary (as in a GPU bundle), or else
// DFLOW_WORKER_BINARY, the one the test target was built with.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "distributed/cluster_spec.h"
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"

namespace dflow::distributed {

inline constexpr char kToken[] = "distributed-test-token";

inline std::string WorkerBinary() {
  auto beside = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dflow-worker";
  return std::filesystem::exists(beside) ? beside.string() : std::string(DFLOW_WORKER_BINARY);
}

// A dflow-worker child process on loopback (distributed/local_worker.h); an empty address when
// it could not start (the test then fails on it).
class WorkerProcess {
 public:
  explicit WorkerProcess(const std::string& devices, const std::string& token = kToken,
                         const std::string& release_after = "300",
                         const std::vector<std::string>& more_flags = {}) {
    auto token_file = WriteTokenFile(::testing::TempDir(), token);
    EXPECT_TRUE(token_file.ok()) << token_file.status().ToString();
    if (!token_file.ok()) return;
    // One thread each: the tests run beside others on two cores.
    std::vector<std::string> flags = {"--devices",       devices,       "--token-file", *token_file,
                                      "--release-after", release_after, "--threads",    "1"};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    auto w = LocalWorker::Start(WorkerBinary(), flags);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (w.ok()) worker_ = std::move(w).value();
  }
  const std::string& address() const {
    static const std::string none;
    return worker_ ? worker_->address() : none;
  }
  int Stop(int sig) { return worker_ ? worker_->Stop(sig) : -1; }

 private:
  std::unique_ptr<LocalWorker> worker_;
};

// Starts `argv` as a child process with its output discarded; its pid.
inline pid_t LocalProcess(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    execv(args[0], args.data());
    std::_Exit(127);
  }
  return pid;
}

inline DistributedOptions Cluster(const std::vector<const WorkerProcess*>& workers,
                                  const std::string& token = kToken) {
  DistributedOptions o;
  for (const auto* w : workers) o.cluster.jobs["worker"].push_back(w->address());
  o.token = token;
  o.connect_timeout = std::chrono::seconds(10);
  return o;
}

}  // namespace dflow::distributed
