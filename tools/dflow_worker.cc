// dflow-worker: a process that runs its share of graphs for a master (distributed/).
//
//   dflow-worker --listen 127.0.0.1:7001 --devices cpu:0,cpu:1 --token-file FILE
//                [--memory-limit SIZE] [--threads N] [--release-after SECONDS] [--fixed-costs]
//                [--max-concurrent-steps N] [--max-jobs N]
//   dflow-worker --master HOST[:PORT]|auto --token-file FILE [--rank N] ...
//
// Port 0 picks a free port; under a launcher (mpirun, srun, PMIx, torchrun-style variables) the
// port is offset by the rank on this host (tools/launch_rank.h). Once ready it prints exactly one
// line on stdout, "listening on HOST:PORT", and serves until SIGTERM or SIGINT (a clean exit,
// status 0). The first master to connect names it (/job:worker/task:N) and it keeps that name;
// later masters may call it otherwise (distributed/task_names.h). Each master's work is a job of
// its own, with its own devices, variables and graphs (distributed/worker_service.h; masters
// share one by naming it, dflow-run --job); at most --max-jobs (default 16) at once. When none
// of a job's masters has been connected for --release-after seconds (default 300; 0: never), it
// drops that job's compiled graphs and variables. It measures its CPU when a master first asks for
// its devices and registers those figures (--fixed-costs: the cost model's defaults instead). Each
// step starts at once on a thread of its own; past --max-concurrent-steps (default 64) one is
// refused.
//
// With a master (--master, or MASTER_ADDR set) it joins the master's rendezvous
// (distributed/rendezvous.h) with its rank (--rank, else its launcher's), world size and devices,
// listening by default on this host's address toward the master; it exits (status 0) when that
// master has gone, which ends a launcher's step. `--master auto` finds the master from the
// launcher: MASTER_ADDR and MASTER_PORT, else the first host of the Slurm step at --master-port.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "distributed/local_worker.h"
#include "distributed/rendezvous.h"
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
  int max_concurrent_steps = 64;
  int max_jobs = 16;
  int threads = 0;
  bool fixed_costs = false;
  std::string master;
  int master_port = dflow::tools::kDefaultMasterPort;
  int rank_flag = -1;
  double join_timeout = 120;
  int heartbeat_fd = -1;
  double peer_timeout = 1.5;
  bool no_cross_memory = false;
  auto* listen_flag = app.add_option(
      "--listen", listen,
      "HOST:PORT to listen on (port 0: any free port); under a launcher, PORT plus the "
      "process's rank on this host (default 127.0.0.1:0; with a master, this host's address "
      "toward it, port 0)");
  app.add_option("--master", master,
                 "join this master's rendezvous: HOST:PORT, HOST (at --master-port), or 'auto' "
                 "(MASTER_ADDR and MASTER_PORT, else the first host of the Slurm step); "
                 "default: MASTER_ADDR when set, else none (wait to be connected to)");
  app.add_option("--master-port", master_port,
                 "the master's port when only its host is known (default 29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--rank", rank_flag, "this worker's rank with --master (default: the launcher's)")
      ->check(dflow::tools::AtLeast(0));
  app.add_option("--join-timeout", join_timeout,
                 "seconds to reach the master and for all its workers to join (default 120)")
      ->check(dflow::tools::NonNegative());
  app.add_option("--devices", devices,
                 "this worker's devices: cpu:0,cpu:1,gpu:0,... (any type this process has)");
  app.add_option("--token-file", token_file, "file holding the cluster token")->required();
  app.add_option("--memory-limit", memory_limit, "per device, e.g. 512MiB (default: all)");
  app.add_option("--threads", threads, "threads for all its devices (0: every core)")
      ->check(dflow::tools::AtLeast(0));
  app.add_option("--release-after", release_after,
                 "seconds without a master before dropping a job's graphs and variables (0: never)")
      ->check(dflow::tools::NonNegative());
  app.add_option("--max-concurrent-steps", max_concurrent_steps,
                 "steps this worker runs at once; one more is refused (default 64)")
      ->check(dflow::tools::AtLeast(1));
  app.add_option("--max-jobs", max_jobs,
                 "masters' jobs this worker holds at once, each with its own devices and "
                 "variables; one more is refused (default 16)")
      ->check(dflow::tools::AtLeast(1));
  app.add_flag("--fixed-costs", fixed_costs,
               "register the cost model's fixed device figures instead of measuring this "
               "machine's CPU (the same placement on every run)");
  app.add_option("--peer-timeout", peer_timeout,
                 "seconds of silence after which a peer (the master, another worker) counts as "
                 "lost; heartbeats go six times as often (default 1.5)")
      ->check(CLI::Range(0.05, 3600.0));
  app.add_flag("--no-cross-memory", no_cross_memory,
               "never read or map the memory of other processes of this host, nor offer its "
               "own (large tensors between them then go through UCX's shared memory)");
  app.add_option("--heartbeat-fd", heartbeat_fd,
                 "write a byte to this file descriptor four times a second (dflow-launch watches "
                 "for hung workers with it)")
      ->check(dflow::tools::AtLeast(0));
  if (auto code = dflow::tools::Parse(app, argc, argv)) return *code;
  if (heartbeat_fd >= 0) {
    // A launcher gone must not kill the worker through its pipe.
    signal(SIGPIPE, SIG_IGN);
    fcntl(heartbeat_fd, F_SETFL, O_NONBLOCK);
  }

  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // The master: given, or from the launcher's variables.
  auto launch = dflow::tools::LaunchRankFromEnvironment();
  if (!launch.ok()) return Fail(launch.status());
  std::string master_source = "--master";
  if (master.empty() && std::getenv("MASTER_ADDR") != nullptr) master = "auto";
  if (master == "auto") {
    auto found = dflow::tools::MasterFromEnvironment(master_port);
    if (!found.ok()) return Fail(found.status());
    if (!found->has_value()) {
      return Fail(dflow::InvalidArgument("--master auto: neither MASTER_ADDR nor a Slurm step's "
                                         "SLURM_STEP_NODELIST is set"),
                  dflow::tools::kUsageError);
    }
    master = (*found)->address;
    master_source = (*found)->source;
  } else if (!master.empty() && master.back() != ']' &&
             (master.find(':') == std::string::npos || master.front() == '[')) {
    master += ":" + std::to_string(master_port);  // a host alone
  }
  if (!master.empty() && listen_flag->count() == 0) {
    auto host = dflow::tools::LocalHostToward(master);
    if (!host.ok()) return Fail(host.status().WithPrefix("--master: "));
    listen = *host + ":0";
  }
  // Under a launcher: the port plus the rank on this host (or the rank, when it does not say).
  if (launch->has_value()) {
    const dflow::tools::LaunchRank& r = **launch;
    auto offset = dflow::tools::PortForRank(listen, r.local_rank >= 0 ? r.local_rank : r.rank);
    if (!offset.ok()) return Fail(offset.status());
    listen = *offset;
    std::fprintf(stderr, "dflow-worker: rank %d of %s (%s%s)\n", r.rank,
                 r.world_size > 0 ? std::to_string(r.world_size).c_str() : "?", r.source.c_str(),
                 r.job_id.empty() ? "" : (" job " + r.job_id).c_str());
  }
  auto token = dflow::distributed::ReadTokenFile(token_file);
  if (!token.ok()) return Fail(token.status());
  auto device_list = dflow::tools::ParseDeviceList(devices);
  if (!device_list.ok()) return Fail(device_list.status(), dflow::tools::kUsageError);
  dflow::distributed::WorkerOptions options;
  options.devices = *device_list;
  options.threads = threads;
  options.calibrate = !fixed_costs;
  options.max_concurrent_steps = max_concurrent_steps;
  options.max_jobs = max_jobs;
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
  t.peer_timeout = std::chrono::milliseconds(static_cast<int64_t>(peer_timeout * 1000));
  t.cross_memory = !no_cross_memory;
  auto t_log = [](std::string_view line) {
    std::fprintf(stderr, "dflow-worker: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  t.log = t_log;
  auto transport = dflow::transport::TransportRegistry::Global().Create("ucx", std::move(t));
  if (!transport.ok()) return Fail(transport.status());
  dflow::distributed::SetReplyLimits(**transport);  // its calls to other workers
  auto service = dflow::distributed::WorkerService::Create(transport->get(), options);
  if (!service.ok()) return Fail(service.status());

  std::printf("listening on %s\n", (*transport)->listen_address().c_str());
  std::fflush(stdout);

  std::unique_ptr<dflow::distributed::Registration> registration;
  if (!master.empty()) {
    dflow::distributed::RegisterOptions join;
    join.master = master;
    join.token = *token;
    join.timeout = std::chrono::milliseconds(static_cast<int64_t>(join_timeout * 1000));
    join.log = t_log;
    join.request.rank = rank_flag >= 0 ? rank_flag : (launch->has_value() ? (*launch)->rank : -1);
    join.request.world_size = launch->has_value() ? (*launch)->world_size : 0;
    join.request.address = (*transport)->listen_address();
    join.request.devices = *device_list;
    join.request.launcher = launch->has_value() ? (*launch)->source : "";
    if (join.request.world_size > 0 && join.request.rank >= join.request.world_size) {
      return Fail(dflow::InvalidArgument("--rank {} is past the launcher's world size {}",
                                         join.request.rank, join.request.world_size),
                  dflow::tools::kUsageError);
    }
    std::fprintf(stderr, "dflow-worker: joining the master at %s (from %s)\n", master.c_str(),
                 master_source.c_str());
    auto joined = dflow::distributed::Registration::Join(std::move(join));
    if (!joined.ok()) return Fail(joined.status());
    registration = std::move(joined).value();
    std::fprintf(stderr, "dflow-worker: joined the master at %s as %s (%d workers)\n",
                 master.c_str(), registration->reply().task.c_str(),
                 registration->reply().world_size);
  }

  int sig = 0;
  if (registration == nullptr && heartbeat_fd < 0) {
    sigwait(&stop, &sig);
  } else {
    while (true) {
      // Four times a second: a beat, and a look whether the master is still there.
      if (heartbeat_fd >= 0) (void)!write(heartbeat_fd, "", 1);
      timespec quarter{0, 250'000'000};
      if (int got = sigtimedwait(&stop, nullptr, &quarter); got > 0) {
        sig = got;
        break;
      }
      if (registration != nullptr && registration->master_gone()) {
        std::fprintf(stderr, "dflow-worker: the master at %s has gone; exiting\n", master.c_str());
        break;
      }
    }
  }
  const dflow::transport::TransportStats stats = (*transport)->stats();
  std::fprintf(stderr,
               "dflow-worker: %s, stopping; tensors sent %llu (by reference %llu, mapped %llu), "
               "received %llu (by reference %llu, mapped %llu); polls by step threads %llu\n",
               sig == SIGTERM  ? "SIGTERM"
               : sig == SIGINT ? "SIGINT"
                               : "its master gone",
               static_cast<unsigned long long>(stats.tensors_sent),
               static_cast<unsigned long long>(stats.tensors_sent_by_reference),
               static_cast<unsigned long long>(stats.tensors_sent_mapped),
               static_cast<unsigned long long>(stats.tensors_received),
               static_cast<unsigned long long>(stats.tensors_received_by_reference),
               static_cast<unsigned long long>(stats.tensors_received_mapped),
               static_cast<unsigned long long>(stats.step_thread_polls));
  registration.reset();
  service->reset();
  transport->reset();
  return 0;
}
