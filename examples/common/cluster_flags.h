// The flags that put an example's training on workers: --local-workers N started here (each
// example says what they hold), the workers of --cluster FILE, or the workers that join the
// example at --rendezvous HOST:PORT (started with --master by srun, mpirun, torchrun-style
// variables, a Kubernetes Job); the last two with --token-file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tools/cli.h"

namespace dflow::examples {

struct ClusterFlags {
  int local_workers = 0;
  std::string cluster_file, token_file, rendezvous;
  int workers = 0;  // with --rendezvous; 0: the launcher's world size
  double rendezvous_timeout = 120;

  // Adds --cluster (its help: `cluster_help`), --rendezvous, --workers, --rendezvous-timeout and
  // --token-file; --local-workers is the example's own.
  void AddTo(CLI::App& app, const std::string& cluster_help) {
    auto* cluster = app.add_option("--cluster", cluster_file, cluster_help);
    app.add_option("--rendezvous", rendezvous,
                   "Listen at HOST:PORT for dflow-workers started with --master (by srun, "
                   "mpirun, ...) and train across them, ordered by rank")
        ->excludes(cluster);
    app.add_option("--workers", workers,
                   "With --rendezvous: workers to wait for (default: their launcher's world size)")
        ->check(tools::AtLeast(1));
    app.add_option("--rendezvous-timeout", rendezvous_timeout,
                   "With --rendezvous: seconds to wait for all the workers")
        ->check(tools::NonNegative());
    app.add_option("--token-file", token_file, "The cluster token (with --cluster, --rendezvous)");
  }
  // Whether training goes to workers.
  bool any() const { return local_workers > 0 || !cluster_file.empty() || !rendezvous.empty(); }
};

}  // namespace dflow::examples
