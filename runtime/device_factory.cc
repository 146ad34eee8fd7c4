#include "runtime/device_factory.h"

#include "ops/register.h"
#include "runtime/cuda_device.h"

namespace dflow {

DeviceFactory& DeviceFactory::Global() {
  static DeviceFactory* factory = [] {
    auto* f = new DeviceFactory;
    Status s = f->Register("CPU",
                           [](const DeviceName& name,
                              const DeviceOptions& options) -> Result<std::unique_ptr<Device>> {
                             ASSIGN_OR_RETURN(auto cpu, CpuDevice::Create(name, options.threads,
                                                                          options.memory_limit));
                             return std::unique_ptr<Device>(std::move(cpu));
                           });
    DFLOW_CHECK(s.ok());
    // "GPU" where CUDA is built in and a GPU is present.
    DFLOW_CHECK(RegisterCudaDeviceType(*f).ok());
    return f;
  }();
  return *factory;
}

Status DeviceFactory::Register(const std::string& type, CreateFn create) {
  RETURN_IF_ERROR(DeviceName::AddType(type));
  MutexLock lock(mu_);
  if (!factories_.emplace(type, std::move(create)).second) {
    return InvalidArgument("device type '{}' is already registered", type);
  }
  return Status::OK();
}

Status DeviceFactory::Unregister(const std::string& type) {
  MutexLock lock(mu_);
  if (factories_.erase(type) == 0) return NotFound("device type '{}' is not registered", type);
  return Status::OK();
}

Result<std::unique_ptr<Device>> DeviceFactory::Create(const DeviceName& name,
                                                      const DeviceOptions& options) const {
  ops::RegisterStandardOps();  // the kernels of every built backend
  DeviceName full = name.WithDefaults();
  if (!full.type || !full.index) {
    return InvalidArgument("device '{}' needs a type and an index, e.g. cpu:0", name.ToString());
  }
  CreateFn create;
  {
    MutexLock lock(mu_);
    auto it = factories_.find(*full.type);
    if (it == factories_.end()) {
      std::string known;
      for (const auto& [type, f] : factories_) known += (known.empty() ? "" : ", ") + type;
      std::string why;
      if (*full.type == "GPU") {  // built without CUDA, or no GPU or driver: say which
        CudaDeviceCount(&why);
        why = "; " + why;
      }
      return NotFound("device '{}': no device type {} in this process (types: {}){}",
                      name.ShortString(), *full.type, known, why);
    }
    create = it->second;
  }
  return create(full, options);
}

std::vector<std::string> DeviceFactory::types() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [type, f] : factories_) out.push_back(type);
  return out;
}

}  // namespace dflow
