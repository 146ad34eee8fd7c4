// DeviceSet: the devices a graph may be placed on, each with a spec for the cost model, and the
// links between them.
//
//   auto devices = DeviceSet::LocalCpus(2);  // cpu:0 and cpu:1, each with half the cores
//   devices->Matching(DeviceName::Parse("cpu").value());  // {0, 1}
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/device_name.h"
#include "graph/status.h"

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

class DeviceSet {
 public:
  // n virtual CPU devices "/job:localhost/task:0/device:CPU:0".. with `spec`'s figures (its
  // name is ignored). InvalidArgument for n < 1.
  static Result<DeviceSet> LocalCpus(int n, const DeviceSpec& spec = {});

  // InvalidArgument when the name is not fully specified or already present, or a figure is not
  // positive (naming the device).
  Status Add(DeviceSpec spec);
  // Overrides the link from `from` to `to` (device indices).
  void SetLink(int from, int to, LinkSpec link);
  void set_link_defaults(const LinkDefaults& d) { defaults_ = d; }

  int size() const { return static_cast<int>(devices_.size()); }
  const DeviceSpec& device(int i) const { return devices_[i]; }
  const std::vector<DeviceSpec>& devices() const { return devices_; }
  std::optional<int> Find(const DeviceName& full) const;
  // Indices of the devices a (partial) request matches, in order.
  std::vector<int> Matching(const DeviceName& request) const;
  LinkSpec Link(int from, int to) const;
  // Device i for messages: "cpu:1" on this process's default job, else "worker:1/gpu:0".
  std::string DisplayName(int i) const;
  // "cpu:0, cpu:1" for messages.
  std::string ShortList() const;

 private:
  std::vector<DeviceSpec> devices_;
  std::map<std::pair<int, int>, LinkSpec> links_;
  LinkDefaults defaults_;
};

}  // namespace dflow
