// DeviceFactory: makes devices by type ("CPU", "GPU"). A device type registers one function here
// and its kernels in the KernelRegistry; sessions and tools create every device through it, so
// a session accepts any registered type.
//
//   DeviceOptions o{.threads = {2, 1}, .memory_limit = 512 << 20};
//   auto cpu = DeviceFactory::Global().Create(DeviceName::Parse("cpu:1").value(), o);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/mutex.h"
#include "runtime/cpu_device.h"
#include "runtime/device.h"

namespace dflow {

struct DeviceOptions {
  ThreadBudget threads;     // the device's share of the host's cores
  size_t memory_limit = 0;  // bytes; 0: the device type's default (CPU: physical memory)
};

class DeviceFactory {
 public:
  using CreateFn =
      std::function<Result<std::unique_ptr<Device>>(const DeviceName&, const DeviceOptions&)>;

  // The process-wide factory, with the CPU type registered.
  static DeviceFactory& Global();

  // InvalidArgument when `type` is already registered or is not 2 to 8 capital letters. A type
  // other than CPU and GPU becomes a device type of names ("xpu:0") from here on.
  Status Register(const std::string& type, CreateFn create);
  // Removes a type (for tests that register a stand-in device); NotFound when absent.
  Status Unregister(const std::string& type) DFLOW_EXCLUDES(mu_);
  // A device named `name` (type and index given; job and task default to this process).
  // NotFound naming the type and the registered ones when no factory has it.
  Result<std::unique_ptr<Device>> Create(const DeviceName& name,
                                         const DeviceOptions& options) const;
  // Registered types, sorted.
  std::vector<std::string> types() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, CreateFn> factories_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
