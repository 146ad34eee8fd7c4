// dflow-worker: a process that runs its share of graphs for a master (distributed/).
//
//   dflow-worker --listen 127.0.0.1:7001 --devices cpu:0,cpu:1 --token-file FILE
//                [--memory-limit SIZE] [--threads N] [--release-after SECONDS] [--fixed-costs]
//
// Port 0 picks a free port; under mpirun, srun or another PMIx launcher the port is offset by
// the rank (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK). Once ready it prints exactly one
// line on stdout,
// "listening on HOST:PORT", and serves until SIGTERM or SIGINT (a clean exit, status 0). The
// first master to connect names it (/job:worker/task:N). When no master has been connected for
// --release-after seconds (default 300; 0: never), it drops its compiled graphs and variables.
// It measures its CPU when a master first asks for its devices and registers those figures
// (--fixed-costs: the cost model's defaults instead).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "distributed/local_worker.h"
#include "distributed/worker_service.h"
#include "ops/register.h"
#include "tools/cli.h"
#include "tools/device_list.h"
#include "tools/launch_rank.h"
#include "tools/size_flag.h"
#include "transport/transport.h"

namespace {

// Prints `s` and gives the exit status: 1, or 2 (dflow::tools::kUsageError) for a flag's bad value.
int Fail(const dflow::Status& s, int code = 1) {
  std::fprintf(stderr, "dflow-worker: %s\n", s.ToString().c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dflow-worker: runs its share of graphs for a dflow master"};
  dflow::tools::Configure(app, "dflow-worker");
  std::string listen = "127.0.0.1:0";
  std::string devices = "cpu:0";
  std::string token_file;
  std::string memory_limit;
  double release_after = 300;
  int threads = 0;
  bool fixed_costs = false;
  app.add_option("--listen", listen,
                 "HOST:PORT to listen on (port 0: any free port); under mpirun, srun or another "
                 "PMIx launcher, PORT plus the process's rank");
  app.add_option("--devices", devices,
                 "this worker's devices: cpu:0,cpu:1,gpu:0,... (any type this process has)");
  app.add_option("--token-file", token_file, "file holding the cluster token")->required();
  app.add_option("--memory-limit", memory_limit, "per device, e.g. 512MiB (default: all)");
  app.add_option("--threads", threads, "threads for all its devices (0: every core)")
      ->check(dflow::tools::AtLeast(0));
  app.add_option("--release-after", release_after,
                 "seconds without a master before dropping graphs and variables (0: never)")
      ->check(dflow::tools::NonNegative());
  app.add_flag("--fixed-costs", fixed_costs,
               "register the cost model's fixed device figures instead of measuring this "
               "machine's CPU (the same placement on every run)");
  if (auto code = dflow::tools::Parse(app, argc, argv)) return *code;

  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // Under mpirun, srun or another PMIx launcher: the port plus the rank.
  auto rank = dflow::tools::LaunchRankFromEnvironment();
  if (!rank.ok()) return Fail(rank.status());
  if (rank->has_value()) {
    auto offset = dflow::tools::PortForRank(listen, (*rank)->rank);
    if (!offset.ok()) return Fail(offset.status());
    listen = *offset;
    std::fprintf(stderr, "dflow-worker: rank %d of %d (%s)\n", (*rank)->rank, (*rank)->world_size,
                 (*rank)->source.c_str());
  }
  auto token = dflow::distributed::ReadTokenFile(token_file);
  if (!token.ok()) return Fail(token.status());
  auto device_list = dflow::tools::ParseDeviceList(devices);
  if (!device_list.ok()) return Fail(device_list.status(), dflow::tools::kUsageError);
  dflow::distributed::WorkerOptions options;
  options.devices = *device_list;
  options.threads = threads;
  options.calibrate = !fixed_costs;
  options.release_after = std::chrono::milliseconds(static_cast<int64_t>(release_after * 1000));
  if (!memory_limit.empty()) {
    auto bytes = dflow::tools::ParseByteSize(memory_limit);
    if (!bytes.ok()) {
      return Fail(bytes.status().WithPrefix("--memory-limit: "), dflow::tools::kUsageError);
    }
    options.memory_limit_bytes = static_cast<double>(*bytes);
  }
  dflow::ops::RegisterStandardOps();
  // Large tensors are memfds (shared with workers of this host): as many files as allowed.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  dflow::transport::TransportOptions t;
  t.token = *token;
  t.listen_address = listen;
  t.log = [](std::string_view line) {
    std::fprintf(stderr, "dflow-worker: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto transport = dflow::transport::TransportRegistry::Global().Create("ucx", std::move(t));
  if (!transport.ok()) return Fail(transport.status());
  auto service = dflow::distributed::WorkerService::Create(transport->get(), options);
  if (!service.ok()) return Fail(service.status());

  std::printf("listening on %s\n", (*transport)->listen_address().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  const dflow::transport::TransportStats stats = (*transport)->stats();
  std::fprintf(stderr,
               "dflow-worker: %s, stopping; tensors sent %llu (by reference %llu, mapped %llu), "
               "received %llu (by reference %llu, mapped %llu); polls by step threads %llu\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT",
               static_cast<unsigned long long>(stats.tensors_sent),
               static_cast<unsigned long long>(stats.tensors_sent_by_reference),
               static_cast<unsigned long long>(stats.tensors_sent_mapped),
               static_cast<unsigned long long>(stats.tensors_received),
               static_cast<unsigned long long>(stats.tensors_received_by_reference),
               static_cast<unsigned long long>(stats.tensors_received_mapped),
               static_cast<unsigned long long>(stats.step_thread_polls));
  service->reset();
  transport->reset();
  return 0;
}
