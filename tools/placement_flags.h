// The flags dflow-run and dflow-dot share for placing a graph, so both place a graph the same
// way: --devices, --placer, --fixed-costs, --memory-limit and --assume-batch.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tools/cli.h"
#include "tools/device_list.h"
#include "tools/size_flag.h"

namespace dflow::tools {

struct PlacementFlags {
  std::string devices;  // "cpu:0,cpu:1"; empty: the tool's default
  std::string placer = "cost";
  bool fixed_costs = false;
  std::string memory_limit;  // "72MiB"; empty: DeviceSpec's default
  int64_t assume_batch = 0;  // 0: CostOptions' default

  // Set by Check(): --devices canonical and sorted (device_list.h), --memory-limit in bytes.
  std::vector<std::string> device_list;
  int64_t memory_bytes = 0;

  void AddTo(CLI::App& app, const std::string& devices_help) {
    app.add_option("--devices", devices, devices_help);
    app.add_option("--placer", placer, "cost (the cost model) or simple (one device)")
        ->check(CLI::IsMember({"cost", "simple"}));
    app.add_flag("--fixed-costs", fixed_costs,
                 "Give the placer fixed device figures instead of measuring this machine (about "
                 "0.1 s): the same graph is then placed the same way on every run and machine");
    app.add_option("--memory-limit", memory_limit,
                   "SIZE: the memory each device offers the placer, e.g. 72MiB, 1.5GB or "
                   "1048576 (bytes); variables plus peak activations must fit it, so a low "
                   "limit spreads a model over the devices (default: a CPU's is this machine's "
                   "memory, a GPU's its own)");
    app.add_option("--assume-batch", assume_batch,
                   "N: the size the placer's estimates give dimensions unknown until run time, "
                   "usually the batch")
        ->check(AtLeast(1))
        ->default_str(std::to_string(CostOptions{}.unknown_dim));
  }

  // After parsing: checks and canonicalises --devices and --memory-limit. InvalidArgument naming
  // the flag and its text (a usage error).
  Status Check() {
    if (!devices.empty()) {
      ASSIGN_OR_RETURN(device_list, ParseDeviceList(devices));
    }
    if (!memory_limit.empty()) {
      auto bytes = ParseByteSize(memory_limit);
      if (!bytes.ok()) return bytes.status().WithPrefix("--memory-limit: ");
      memory_bytes = *bytes;
    }
    return Status::OK();
  }

  // True when a flag that only matters to the placer was given.
  bool tunes_placer() const { return !memory_limit.empty() || assume_batch > 0; }

  // Sets the session's devices (when --devices was given), placer, calibration, memory and
  // assumed batch. REQUIRES: Check() succeeded.
  void ApplyTo(SessionOptions& options) const {
    if (!device_list.empty()) options.devices = device_list;
    options.placer.kind =
        placer == "simple" ? PlacerOptions::Kind::kSimple : PlacerOptions::Kind::kCost;
    options.calibrate_devices = !fixed_costs;
    if (memory_bytes > 0) options.device_memory_bytes = static_cast<double>(memory_bytes);
    if (assume_batch > 0) options.placer.costs.unknown_dim = assume_batch;
  }
};

// The placement of a multi-device session in a few lines, for stderr.
inline std::string PlacementSummary(const DeviceSet& devices, const PlacementReport& placement) {
  int n = devices.size();
  return fmt::format("placement on {} device{}: {}", n, n == 1 ? "" : "s",
                     placement.Summary(devices));
}
inline std::string PlacementSummary(const Session& session) {
  return PlacementSummary(session.device_set(), session.placement());
}

}  // namespace dflow::tools
