// A session's devices and placement: the devices its options name, made through the
// DeviceFactory (framework/device_factory.h) with their calibrated figures, and the placement of
// its graph over them (placer/placer.h). A local session, a worker and the tools start here.
#pragma once

#include <memory>
#include <vector>

#include "framework/device.h"
#include "graph/graph.h"
#include "placer/placer.h"
#include "runtime/session.h"

namespace dflow {

// The devices a session's options name, made through the DeviceFactory, and the DeviceSet the
// placer sees: `devices` (or the one `device`), each with an equal share of the thread budget
// when there are several, its memory limit (device_memory_bytes, else the device's default) as
// the placer's memory, calibrated figures (calibrate_devices: the host CPU measured, then each
// device type's calibrate and link hooks, framework/device_type.h), and
// device_specs by canonical name. `shareable_memory`: DeviceOptions::shareable_memory (a
// worker's devices). InvalidArgument names a device given twice or a device_specs entry that
// names no device; NotFound a device type not built.
struct SessionDevices {
  std::vector<std::unique_ptr<Device>> devices;
  DeviceSet set;
};
Result<SessionDevices> CreateSessionDevices(const SessionOptions& options,
                                            bool shareable_memory = false);

// Places validated `graph` as a session with `options` does: with `devices` given, the placer
// with the options' placer settings, cost file and logging; on the one `device`, every node on
// it after checking the nodes' requests (FailedPrecondition naming node and device).
Result<PlacementReport> PlaceForSession(const Graph& graph, const DeviceSet& devices,
                                        const SessionOptions& options);

}  // namespace dflow
