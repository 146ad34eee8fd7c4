// DeviceType: what a backend (ops/cpu/, ops/cuda/, a test's stand-in) gives the runtime for one
// kind of device, as a table of functions. `create` and `register_kernels` are required; the
// optional slots say their default. The runtime reaches a device type only through this table
// (framework/device_factory.h checks and fills in the defaults): no code outside a backend names
// its device class.
//
//   DeviceType t;
//   t.name = "XPU";
//   t.create = [](const DeviceName& name, const DeviceOptions& o) { ... };
//   t.register_kernels = [] { return RegisterXpuKernels(); };
//   RETURN_IF_ERROR(DeviceFactory::Global().Register(std::move(t)));
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "framework/device.h"
#include "framework/device_options.h"
#include "framework/device_spec.h"
#include "graph/device_name.h"
#include "graph/status.h"

namespace dflow {

struct DeviceType {
  // 2 to 8 capital letters: "CPU", "GPU". Device names use it, case-insensitively ("gpu:0").
  std::string name;

  // Required. Makes the device `name` (fully specified, of this type). NotFound naming the
  // device when its index is not one of this process's.
  std::function<Result<std::unique_ptr<Device>>(const DeviceName& name,
                                                const DeviceOptions& options)>
      create;

  // Required. Registers the type's kernels (framework/kernel.h): run once, before the type's
  // first device is made or when ops::RegisterStandardOps() registers every kernel.
  std::function<Status()> register_kernels;

  // How many devices of the type this process has: 0, with `why`, when it has none (no driver,
  // no GPU). Default: as many as asked for.
  std::function<int(std::string* why)> count;

  // The placer's figures for `device` (DeviceSpec: peak FLOP/s, memory bandwidth, launch
  // overhead), from `spec` (its name, host and memory kept), when a session calibrates its
  // devices. Default: `spec` as it is (the host CPU's measured figures, runtime/calibration.h).
  std::function<Result<DeviceSpec>(Device& device, DeviceSpec spec)> calibrate;

  // The link from `from` to `to` (two devices of one process, at least one of this type) when a
  // session calibrates its devices; nullopt: the session's defaults (LinkDefaults). Default:
  // always nullopt.
  std::function<std::optional<LinkSpec>(Device& from, Device& to)> link;

  // The channel block (8 or 16) the type's convolutions keep activations in between one
  // another (rewrite/channel_blocks.h: its kernels of _BlockedConv2D, _BlockChannels and
  // _UnblockChannels), or 0 for none. Default: 0.
  std::function<int()> channel_block;
};

}  // namespace dflow
