#include "ops/sim/sim_backend.h"

#include <mutex>

#include "framework/kernel.h"
#include "graph/op_registry.h"
#include "ops/common/common_kernels.h"

namespace dflow::sim {

Status RegisterSimKernels() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    status = [] {
      if (KernelRegistry::Global().Find("MatMul", "CPU") == nullptr) {
        return FailedPrecondition("SIM takes the CPU's kernels: register the standard ops first");
      }
      RETURN_IF_ERROR(common::RegisterDeviceMemoryKernels("SIM"));
      for (const std::string& op : OpRegistry::Global().OpNames()) {
        if (KernelRegistry::Global().Find(op, "SIM") != nullptr) continue;
        const KernelFactory* cpu = KernelRegistry::Global().Find(op, "CPU");
        if (cpu != nullptr) RETURN_IF_ERROR(KernelRegistry::Global().Register(op, "SIM", *cpu));
      }
      return Status::OK();
    }();
  });
  return status;
}

DeviceType SimDeviceType(std::function<void(SimDevice*)> on_create) {
  DeviceType t;
  t.name = "SIM";
  t.create = [on_create](const DeviceName& name,
                         const DeviceOptions& options) -> Result<std::unique_ptr<Device>> {
    auto d = std::make_unique<SimDevice>(name, options.memory_limit);
    if (on_create) on_create(d.get());
    return std::unique_ptr<Device>(std::move(d));
  };
  t.register_kernels = RegisterSimKernels;
  return t;
}

}  // namespace dflow::sim
