// The pipeline flags that dflow-run and the examples share: --micro-batches, --stages,
// --schedule (and, for dflow-run, --loss and --gather), and what they do to a training graph
// (placer/pipeline.h): cut it into stages, one per device, planned with the devices' figures and
// memory, the batch split into micro-batches.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "placer/pipeline.h"
#include "runtime/calibration.h"

namespace dflow::tools {

struct PipelineFlags {
  int micro_batches = 0;  // 0: no pipeline
  int stages = 0;         // 0: every device (every worker)
  std::string schedule = "1f1b";
  std::string loss = "loss";
  std::vector<std::string> gathered;

  // --micro-batches, --stages (excluding `devices_option`, when given) and --schedule; with
  // `graph_names`, --loss and --gather too (the examples name their own).
  void AddTo(CLI::App& app, bool graph_names, const std::string& devices_option = "") {
    app.add_option("--micro-batches", micro_batches,
                   "Pipeline parallelism: cut the model into stages, one per device, and split "
                   "each batch into M micro-batches that flow through them (0: no pipeline)")
        ->check(CLI::Range(0, 4096));
    auto* k = app.add_option("--stages", stages,
                             "With --micro-batches: K stages on cpu:0 to cpu:K-1 (with a "
                             "cluster, the first K workers' cpu:0); default: every device, or "
                             "every worker")
                  ->check(CLI::Range(1, 64));
    if (!devices_option.empty()) k->excludes(devices_option);
    app.add_option("--schedule", schedule, "With --micro-batches: 1f1b or gpipe")
        ->check(CLI::IsMember({"1f1b", "gpipe"}));
    has_graph_names_ = graph_names;
    if (!graph_names) return;
    app.add_option("--loss", loss,
                   "With --micro-batches: the loss node, a mean over the batch (default: loss)");
    app.add_option("--gather", gathered,
                   "With --micro-batches: NAME, a node with a value per example to fetch whole "
                   "(its micro-batches' values concatenated)");
  }

  bool on() const { return micro_batches > 0; }

  // After parsing: InvalidArgument for a pipeline flag without --micro-batches.
  Status Check(const CLI::App& app) const {
    if (on()) return Status::OK();
    std::vector<const char*> flags = {"--stages", "--schedule"};
    if (has_graph_names_) flags.insert(flags.end(), {"--loss", "--gather"});
    for (const char* flag : flags) {
      if (app.count(flag) > 0) return InvalidArgument("{} goes with --micro-batches", flag);
    }
    return Status::OK();
  }

  // The stage devices of this process: cpu:0 to cpu:K-1 for --stages K, else `devices`.
  std::vector<std::string> LocalDevices(const std::vector<std::string>& devices) const {
    if (stages == 0) return devices;
    std::vector<std::string> out;
    for (int s = 0; s < stages; ++s) out.push_back(fmt::format("cpu:{}", s));
    return out;
  }

  // The stage devices of a cluster of `workers` workers (each worker's cpu:0, the first
  // --stages of them) in `set`, with this host's CPU figures calibrated with
  // `threads_per_worker` threads (or DeviceSpec's defaults: `fixed_costs`) and `memory_bytes`
  // each (0: the default). InvalidArgument when --stages asks for more workers than there are.
  Result<std::vector<std::string>> WorkerDevices(int workers, int threads_per_worker,
                                                 bool fixed_costs, double memory_bytes,
                                                 DeviceSet* set) const {
    const int k = stages > 0 ? stages : workers;
    if (k > workers) {
      return InvalidArgument("--stages {}: the cluster has {} workers", k, workers);
    }
    CpuCalibration calibration;
    if (!fixed_costs) {
      ASSIGN_OR_RETURN(calibration, CachedCpuCalibration(threads_per_worker));
    }
    std::vector<std::string> devices;
    for (int t = 0; t < k; ++t) {
      DeviceSpec spec = fixed_costs ? DeviceSpec{} : calibration.Apply({});
      spec.name = DeviceName::Full("worker", t, "CPU", 0);
      if (memory_bytes > 0) spec.memory_bytes = memory_bytes;
      RETURN_IF_ERROR(set->Add(spec));
      devices.push_back(spec.name.ToString());
    }
    return devices;
  }

  // `graph` pipelined over `devices` (their figures and limits in `set`) for batches of
  // `batch` examples (which must divide by --micro-batches); prints the stages and the
  // predicted step to `out` with `memory_bytes` as each device's limit (0: none shown).
  // `micro_batch` gets the micro-batch's size, for the session's placer (unknown_dim).
  Result<PipelinedGraph> Apply(const Graph& graph, const std::vector<std::string>& devices,
                               const DeviceSet& set, int64_t batch, double memory_bytes,
                               std::FILE* out, int64_t* micro_batch) const {
    if (batch % micro_batches != 0) {
      return InvalidArgument("the batch of {} examples does not divide into {} micro-batches",
                             batch, micro_batches);
    }
    PipelineOptions pipe;
    pipe.devices = devices;
    pipe.micro_batches = micro_batches;
    ASSIGN_OR_RETURN(pipe.schedule, ParseSchedule(schedule));
    pipe.loss = loss;
    pipe.gathered = gathered;
    pipe.device_set = &set;
    pipe.costs.unknown_dim = batch;
    ASSIGN_OR_RETURN(PipelinedGraph piped, Pipeline(graph, pipe));
    std::vector<double> limits;
    if (memory_bytes > 0) limits.assign(devices.size(), memory_bytes);
    std::fprintf(out, "%s", piped.Summary(limits).c_str());
    std::fflush(out);
    *micro_batch = batch / micro_batches;
    return piped;
  }

 private:
  bool has_graph_names_ = false;  // AddTo added --loss and --gather
};

}  // namespace dflow::tools
