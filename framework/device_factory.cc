#include "framework/device_factory.h"

namespace dflow {

Status DeviceFactory::Register(DeviceType type) {
  if (!type.create || !type.register_kernels) {
    return InvalidArgument("device type '{}' needs a create function and a register_kernels one",
                           type.name);
  }
  RETURN_IF_ERROR(DeviceName::AddType(type.name));
  const std::string name = type.name;
  auto entry = std::make_shared<Entry>();
  entry->type = std::move(type);
  MutexLock lock(mu_);
  if (!types_.emplace(name, std::move(entry)).second) {
    return InvalidArgument("device type '{}' is already registered", name);
  }
  return Status::OK();
}

Status DeviceFactory::Unregister(const std::string& type) {
  MutexLock lock(mu_);
  if (types_.erase(type) == 0) return NotFound("device type '{}' is not registered", type);
  return Status::OK();
}

std::shared_ptr<const DeviceFactory::Entry> DeviceFactory::Find(const std::string& type) const {
  MutexLock lock(mu_);
  auto it = types_.find(type);
  return it == types_.end() ? nullptr : it->second;
}

Status DeviceFactory::EnsureKernels(const Entry& entry) {
  std::call_once(*entry.kernels_once,
                 [&entry] { *entry.kernels_status = entry.type.register_kernels(); });
  return *entry.kernels_status;
}

Result<std::unique_ptr<Device>> DeviceFactory::Create(const DeviceName& name,
                                                      const DeviceOptions& options) const {
  DeviceName full = name.WithDefaults();
  if (!full.type || !full.index) {
    return InvalidArgument("device '{}' needs a type and an index, e.g. cpu:0", name.ToString());
  }
  std::shared_ptr<const Entry> entry = Find(*full.type);
  std::string why;
  if (entry != nullptr && entry->type.count && entry->type.count(&why) == 0) entry = nullptr;
  if (entry == nullptr) {
    std::string known;
    for (const auto& t : types()) known += (known.empty() ? "" : ", ") + t;
    return NotFound("device '{}': no device type {} in this process (types: {}){}",
                    name.ShortString(), *full.type, known, why.empty() ? "" : "; " + why);
  }
  RETURN_IF_ERROR(EnsureKernels(*entry).WithPrefix(
      fmt::format("registering the kernels of device type {}: ", *full.type)));
  return entry->type.create(full, options);
}

std::vector<std::string> DeviceFactory::types() const {
  std::vector<std::shared_ptr<const Entry>> all;
  {
    MutexLock lock(mu_);
    for (const auto& [type, entry] : types_) all.push_back(entry);
  }
  std::vector<std::string> out;
  for (const auto& e : all) {
    if (!e->type.count || e->type.count(nullptr) > 0) out.push_back(e->type.name);
  }
  return out;
}

int DeviceFactory::Count(const std::string& type, std::string* why) const {
  std::shared_ptr<const Entry> entry = Find(type);
  if (entry == nullptr) {
    if (why != nullptr) *why = fmt::format("no device type {} in this build", type);
    return 0;
  }
  return entry->type.count ? entry->type.count(why) : 1 << 20;
}

Status DeviceFactory::RegisterKernels() const {
  std::vector<std::shared_ptr<const Entry>> all;
  {
    MutexLock lock(mu_);
    for (const auto& [type, entry] : types_) all.push_back(entry);
  }
  for (const auto& e : all) {
    RETURN_IF_ERROR(EnsureKernels(*e).WithPrefix(
        fmt::format("registering the kernels of device type {}: ", e->type.name)));
  }
  return Status::OK();
}

Result<DeviceSpec> DeviceFactory::Calibrate(Device& device, DeviceSpec spec) const {
  std::shared_ptr<const Entry> entry = Find(device.type());
  if (entry == nullptr || !entry->type.calibrate) return spec;
  return entry->type.calibrate(device, std::move(spec));
}

int DeviceFactory::ChannelBlock(const std::string& type) const {
  std::shared_ptr<const Entry> entry = Find(type);
  return entry == nullptr || !entry->type.channel_block ? 0 : entry->type.channel_block();
}

std::optional<LinkSpec> DeviceFactory::Link(Device& from, Device& to) const {
  for (Device* d : {&from, &to}) {
    std::shared_ptr<const Entry> entry = Find(d->type());
    if (entry == nullptr || !entry->type.link) continue;
    if (auto link = entry->type.link(from, to)) return link;
  }
  return std::nullopt;
}

}  // namespace dflow
