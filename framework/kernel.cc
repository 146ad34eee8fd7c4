#include "framework/kernel.h"

#include <algorithm>

namespace dflow {

Result<Tensor*> KernelContext::AllocateOutput(int i, DType dtype, const Shape& shape) {
  Allocator* allocator = allocator_;
  if (output_memory_ != nullptr && shape.fully_defined() && dtype != DType::kInvalid &&
      shape.num_elements() < (int64_t{1} << 48)) {
    size_t bytes = static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype);
    if (bytes > 0) {
      if (Allocator* planned = output_memory_->ForOutput(output_base_ + i, bytes)) {
        allocator = planned;
      }
    }
  }
  ASSIGN_OR_RETURN(outputs_[i], Tensor::Allocate(allocator, dtype, shape));
  return &outputs_[i];
}

Result<Tensor> KernelContext::AllocateTemp(size_t bytes) {
  return Tensor::Allocate(allocator_, DType::kU8, Shape{static_cast<int64_t>(bytes)});
}

bool KernelContext::IsLastUse(int i) const {
  int slot = input_slots_[i];
  for (int j = 0; j < num_inputs_; ++j) {
    if (j != i && input_slots_[j] == slot) return false;
  }
  return remaining_uses_ != nullptr && remaining_uses_[slot] == 1;
}

Result<Tensor*> KernelContext::ForwardOrAllocateOutput(int in, int out, DType dtype,
                                                       const Shape& shape) {
  const Tensor& t = input(in);
  if (IsLastUse(in) && t.buffer_unique() && t.dtype() == dtype && t.shape() == shape) {
    outputs_[out] = t;
    outputs_[out].clear_known_bound();  // the kernel is about to overwrite it
    return &outputs_[out];
  }
  return AllocateOutput(out, dtype, shape);
}

KernelRegistry& KernelRegistry::Global() {
  static auto* registry = new KernelRegistry;
  return *registry;
}

Status KernelRegistry::Register(const std::string& op, const std::string& device_type,
                                KernelFactory factory) {
  std::unique_lock lock(mu_);
  auto& by_device = kernels_[op];
  if (by_device.count(device_type)) {
    return InvalidArgument("a {} kernel for op '{}' is already registered", device_type, op);
  }
  by_device.emplace(device_type, std::move(factory));
  return Status::OK();
}

const KernelFactory* KernelRegistry::Find(const std::string& op,
                                          const std::string& device_type) const {
  std::shared_lock lock(mu_);
  auto it = kernels_.find(op);
  if (it == kernels_.end()) return nullptr;
  auto k = it->second.find(device_type);
  return k == it->second.end() ? nullptr : &k->second;
}

std::vector<std::string> KernelRegistry::DeviceTypesFor(const std::string& op) const {
  std::shared_lock lock(mu_);
  std::vector<std::string> types;
  auto it = kernels_.find(op);
  if (it != kernels_.end()) {
    for (const auto& [type, f] : it->second) types.push_back(type);
  }
  std::sort(types.begin(), types.end());
  return types;
}

}  // namespace dflow
