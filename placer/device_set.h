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

#include "framework/device_spec.h"
#include "graph/device_name.h"
#include "graph/status.h"

namespace dflow {

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
