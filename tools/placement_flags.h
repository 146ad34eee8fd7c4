// The flags dflow-run and dflow-dot share for placing a graph, so both place a graph the same
// way: --devices, --placer and --fixed-costs.
#pragma once

#include <CLI/CLI.hpp>
#include <sstream>
#include <string>

#include "runtime/session.h"

namespace dflow::tools {

struct PlacementFlags {
  std::string devices;  // "cpu:0,cpu:1"; empty: the tool's default
  std::string placer = "cost";
  bool fixed_costs = false;

  void AddTo(CLI::App& app, const std::string& devices_help) {
    app.add_option("--devices", devices, devices_help);
    app.add_option("--placer", placer, "cost (the cost model) or simple (one device)")
        ->check(CLI::IsMember({"cost", "simple"}));
    app.add_flag("--fixed-costs", fixed_costs,
                 "Give the placer fixed device figures instead of measuring this machine (about "
                 "0.1 s): the same graph is then placed the same way on every run and machine");
  }

  // Sets the session's devices (when --devices was given), placer and calibration.
  void ApplyTo(SessionOptions& options) const {
    if (!devices.empty()) {
      options.devices.clear();
      std::stringstream list(devices);
      for (std::string d; std::getline(list, d, ',');) options.devices.push_back(d);
    }
    options.placer.kind =
        placer == "simple" ? PlacerOptions::Kind::kSimple : PlacerOptions::Kind::kCost;
    options.calibrate_devices = !fixed_costs;
  }
};

}  // namespace dflow::tools
