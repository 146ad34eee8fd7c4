// The cluster an example trains across (builds with UCX only): --local-workers N dflow-workers
// started here, next to the example's binary, the workers of --cluster FILE, or those that join
// at --rendezvous HOST:PORT (examples/common/cluster_flags.h).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "distributed/cluster_spec.h"
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "distributed/rendezvous.h"
#include "examples/common/cluster_flags.h"

namespace dflow::examples {

struct LocalCluster {
  std::vector<std::unique_ptr<distributed::LocalWorker>> workers;  // stopped with it
  std::unique_ptr<distributed::RendezvousServer> rendezvous;       // its workers leave when it goes
  distributed::DistributedOptions options;

  // The first CPU of every task, by job name then index: "/job:worker/task:0/device:CPU:0", ...
  std::vector<std::string> CpuDevices() const {
    std::vector<std::string> devices;
    for (const auto& [job, tasks] : options.cluster.jobs) {
      for (size_t t = 0; t < tasks.size(); ++t) {
        devices.push_back("/job:" + job + "/task:" + std::to_string(t) + "/device:CPU:0");
      }
    }
    return devices;
  }
};

// `flags.local_workers` > 0: starts them with `worker_flags` (and `token` in a file made here and
// removed once they read it), printing each address; otherwise reads the token file and loads
// the cluster file or waits at the rendezvous.
inline Result<LocalCluster> StartCluster(const std::string& argv0, const ClusterFlags& flags,
                                         const std::string& token,
                                         const std::vector<std::string>& worker_flags) {
  LocalCluster c;
  const int local_workers = flags.local_workers;
  if (local_workers > 0) {
    c.options.token = token;
    ASSIGN_OR_RETURN(std::string file, distributed::WriteTokenFile("/tmp", token));
    const std::string worker = argv0.substr(0, argv0.rfind('/') + 1) + "dflow-worker";
    std::vector<std::string> args = {"--token-file", file};
    args.insert(args.end(), worker_flags.begin(), worker_flags.end());
    for (int i = 0; i < local_workers; ++i) {
      auto w = distributed::LocalWorker::Start(worker, args);
      if (!w.ok()) {
        std::remove(file.c_str());
        return w.status();
      }
      c.options.cluster.jobs["worker"].push_back((*w)->address());
      std::printf("started dflow-worker %d at %s\n", i, (*w)->address().c_str());
      c.workers.push_back(std::move(w).value());
    }
    std::remove(file.c_str());
    return c;
  }
  if (flags.token_file.empty()) {
    return InvalidArgument("--cluster and --rendezvous need the cluster's --token-file");
  }
  auto read = distributed::ReadTokenFile(flags.token_file);
  if (!read.ok()) return read.status().WithPrefix("--token-file: ");
  c.options.token = *read;
  if (!flags.rendezvous.empty()) {
    distributed::RendezvousOptions r;
    r.listen = flags.rendezvous;
    r.token = *read;
    r.expected_workers = flags.workers;
    r.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.rendezvous_timeout * 1000));
    ASSIGN_OR_RETURN(c.options.cluster, distributed::GatherWorkers(std::move(r), &c.rendezvous));
    return c;
  }
  ASSIGN_OR_RETURN(c.options.cluster, distributed::ClusterSpec::Load(flags.cluster_file));
  return c;
}

}  // namespace dflow::examples
