// DeviceSpec and LinkSpec: what the placer's cost model knows of a device and of the link
// between two devices. A device type's calibration (framework/device_type.h) fills them in;
// placer/device_set.h gathers them for a placement.
#pragma once

#include <cstdint>
#include <string>

#include "graph/device_name.h"

namespace dflow {

// What the cost model knows of a device. Defaults describe one core of this machine's CPU
// roughly; calibration replaces them with measured figures.
struct DeviceSpec {
  DeviceName name;                        // fully specified
  std::string host = "localhost";         // devices of one host share its links
  double memory_bytes = 8.0 * (1 << 30);  // for variables and activations
  double peak_flops = 100e9;              // FLOP/s
  double memory_bandwidth = 10e9;         // bytes/s
  double launch_overhead_s = 1e-6;        // fixed cost per node
  // The incarnation of the process that owns the device (framework/rendezvous_key.h), written
  // into the rendezvous keys of its Sends.
  uint64_t incarnation = 1;

  std::string type() const { return *name.type; }
  std::string canonical() const { return name.ToString(); }
};

// Moving `bytes` over a link takes latency_s + bytes / bandwidth.
struct LinkSpec {
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s; 0 means free (same device)
  // A connection between processes carries one tensor's bytes at a time, so transfers over it
  // queue; an in-process hand-off moves nothing, so its transfers do not delay each other.
  bool queues = false;
  double Seconds(double bytes) const { return bandwidth > 0 ? latency_s + bytes / bandwidth : 0; }
};

// Links by distance, used where no link was set explicitly.
struct LinkDefaults {
  // In-process hand-off (a copy at worst). Its latency is mostly waking the receiving device's
  // thread: calibration measured 10 to 18 us on a 2-core VM.
  LinkSpec same_process{10e-6, 20e9};
  // Another process on the host (shared memory, CUDA IPC).
  LinkSpec same_host{10e-6, 5e9, true};
  LinkSpec other_host{50e-6, 1.25e9, true};  // the network
};

}  // namespace dflow
