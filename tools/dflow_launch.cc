// dflow-launch: starts N dflow-workers on this host and restarts any that dies, at its address
// (as torchrun and mpirun keep their frameworks' processes), so that a training loop with
// TrainLoopOptions::reconnect goes on after a worker is lost.
//
//   dflow-launch -n 2 --token-file FILE [--host 127.0.0.1] [--base-port 7001]
//                [--cluster-out cluster.json] [--max-restarts 10] [--hang-timeout 10]
//                [-- WORKER FLAGS...]
//
// The workers are the dflow-worker beside dflow-launch's own executable. Worker i listens on
// HOST:BASE_PORT+i (base port 0: free ports, kept across restarts). Once all are ready it writes
// the cluster spec ({"worker": [...]}) to --cluster-out, atomically, and prints it on stdout.
// Each worker beats four times a second through a pipe; one silent for --hang-timeout seconds
// is hung and is killed (SIGKILL). Each death is reported on stderr with how the worker ended,
// and the worker is started again at its address after a pause that doubles with each of its
// restarts (0.5 s, 1 s, 2 s, ... at most 30 s), so a worker that cannot run does not spin; one
// that dies more than --max-restarts times ends dflow-launch with status 1, saying so. SIGTERM
// or SIGINT stops every worker and exits with status 0.
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "distributed/local_worker.h"
#include "serialization/file_util.h"
#include "tools/cli.h"

namespace {

using dflow::distributed::LocalWorker;

int Fail(const dflow::Status& s) {
  std::fprintf(stderr, "dflow-launch: %s\n", s.ToString().c_str());
  return 1;
}

std::string HowItEnded(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dflow-launch: starts dflow-workers on this host and restarts any that dies"};
  dflow::tools::Configure(app, "dflow-launch");
  int n = 1;
  std::string token_file, host = "127.0.0.1", cluster_out;
  int base_port = 0, max_restarts = 10;
  double hang_timeout = 10;
  std::vector<std::string> worker_flags;
  app.add_option("-n,--workers", n, "workers to start")->check(CLI::Range(1, 64));
  app.add_option("--token-file", token_file, "file holding the cluster token")->required();
  app.add_option("--host", host, "address the workers listen on");
  app.add_option("--base-port", base_port, "port of worker 0; worker i gets BASE+i (0: free ports)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--cluster-out", cluster_out, "write the cluster spec (JSON) to this file");
  app.add_option("--max-restarts", max_restarts, "restarts allowed per worker")
      ->check(dflow::tools::AtLeast(0));
  app.add_option("--hang-timeout", hang_timeout,
                 "seconds without a worker's heartbeat before it counts as hung and is killed "
                 "and restarted (0: never)")
      ->check(dflow::tools::NonNegative());
  app.add_option("worker_flags", worker_flags, "flags for every dflow-worker, after --");
  app.allow_extras(false);
  if (auto code = dflow::tools::Parse(app, argc, argv)) return *code;
  if (base_port > 0 && base_port + n - 1 > 65535) {
    return Fail(
        dflow::InvalidArgument("--base-port {} with {} workers is past port 65535", base_port, n));
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // Beside this executable, wherever it was started from (found on PATH, a relative path).
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return Fail(dflow::Internal("cannot find its own executable: {}", error.message()));
  const std::string binary = (self.parent_path() / "dflow-worker").string();
  const bool heartbeat = hang_timeout > 0;
  std::vector<std::string> args = {"--token-file", token_file};
  args.insert(args.end(), worker_flags.begin(), worker_flags.end());
  std::vector<std::unique_ptr<LocalWorker>> workers(n);
  std::vector<std::string> addresses(n);
  std::vector<int> restarts(n, 0);
  for (int i = 0; i < n; ++i) {
    const std::string listen = host + ":" + std::to_string(base_port == 0 ? 0 : base_port + i);
    auto w = LocalWorker::Start(binary, args, listen, {}, heartbeat);
    if (!w.ok()) return Fail(w.status().WithPrefix(fmt::format("worker {}: ", i)));
    addresses[i] = (*w)->address();
    std::fprintf(stderr, "dflow-launch: worker %d (pid %d) at %s\n", i, (*w)->pid(),
                 addresses[i].c_str());
    workers[i] = std::move(w).value();
  }
  std::string spec = "{\"worker\": [";
  for (int i = 0; i < n; ++i) spec += (i ? ", \"" : "\"") + addresses[i] + "\"";
  spec += "]}\n";
  if (!cluster_out.empty()) {
    dflow::Status s = dflow::serialization::WriteFileAtomically(cluster_out, spec);
    if (!s.ok()) return Fail(s);
  }
  std::printf("%s", spec.c_str());
  std::fflush(stdout);

  // Watch: a stop signal ends it all; a dead or hung worker is started again at its address
  // after its pause.
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> restart_at(n);
  for (;;) {
    timespec tick{0, 50'000'000};
    int sig = sigtimedwait(&stop, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      std::fprintf(stderr, "dflow-launch: %s, stopping the workers\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT");
      workers.clear();  // each is sent SIGTERM and reaped
      return 0;
    }
    for (int i = 0; i < n; ++i) {
      if (workers[i] == nullptr) {
        if (Clock::now() < restart_at[i]) continue;
        auto w = LocalWorker::Start(binary, args, addresses[i], {}, heartbeat);
        if (!w.ok()) {
          workers.clear();
          return Fail(w.status().WithPrefix(fmt::format("restarting worker {}: ", i)));
        }
        std::fprintf(stderr, "dflow-launch: worker %d (pid %d) back at %s\n", i, (*w)->pid(),
                     addresses[i].c_str());
        workers[i] = std::move(w).value();
        continue;
      }
      std::optional<int> ended = workers[i]->Exited();
      std::string how;
      if (ended) {
        how = HowItEnded(*ended);
      } else if (const double silent = workers[i]->SecondsSinceHeartbeat();
                 heartbeat && silent > hang_timeout) {
        std::fprintf(stderr,
                     "dflow-launch: worker %d at %s sent no heartbeat for %.1f s (hung); "
                     "killing it\n",
                     i, addresses[i].c_str(), silent);
        workers[i]->Stop(SIGKILL);
        how = "hung";
      } else {
        continue;
      }
      workers[i].reset();
      if (restarts[i] >= max_restarts) {
        workers.clear();
        return Fail(dflow::Unavailable(
            "worker {} at {} {} after {} restarts (--max-restarts {}); giving up", i, addresses[i],
            how, restarts[i], max_restarts));
      }
      ++restarts[i];
      const double pause = std::min(0.5 * std::pow(2.0, restarts[i] - 1), 30.0);
      restart_at[i] = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(pause));
      std::fprintf(stderr, "dflow-launch: worker %d at %s %s; restarting it in %.1f s (%d of %d)\n",
                   i, addresses[i].c_str(), how.c_str(), pause, restarts[i], max_restarts);
    }
  }
}
