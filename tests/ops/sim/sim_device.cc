#include "ops/sim/sim_device.h"

#include <cstring>

namespace dflow::sim {

SimAllocator::SimAllocator(std::string device, size_t limit) : memory_(std::move(device)) {
  memory_.set_limit(limit);
}
void* SimAllocator::Allocate(size_t bytes, size_t alignment) {
  return memory_.Allocate(bytes, alignment);
}
void SimAllocator::Deallocate(void* p, size_t bytes) { memory_.Deallocate(p, bytes); }

SimDevice::SimDevice(const DeviceName& name, size_t limit)
    : Device(name),
      allocator_(MakeAllocator<SimAllocator>(name.ToString(), limit == 0 ? size_t{64} << 20 : limit)),
      context_(this) {}

MemoryStats SimDevice::memory() const {
  return {allocator_->limit(), allocator_->bytes_in_use(), allocator_->peak_bytes()};
}

Result<Tensor> SimDevice::CopyFromHost(const Tensor& host) {
  if (!host.host_accessible()) return InvalidArgument("sim: CopyFromHost of device memory");
  ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(allocator(), host.dtype(), host.shape()));
  if (host.num_bytes() > 0) std::memcpy(t.raw_data(), host.raw_data(), host.num_bytes());
  copies_in++;
  return t;
}

Result<Tensor> SimDevice::CopyToHost(const Tensor& t) {
  if (t.host_accessible()) return InvalidArgument("sim: CopyToHost of host memory");
  if (refuse_copies_out) return Internal("sim: copies out refused");
  Tensor host(t.dtype(), t.shape());
  if (t.num_bytes() > 0) std::memcpy(host.raw_data(), t.raw_data(), t.num_bytes());
  copies_out++;
  return host;
}

Result<Tensor> SimContext::CopyToHost(const Tensor& t) { return device_->CopyToHost(t); }
Result<Tensor> SimContext::CopyFromHost(const Tensor& host) { return device_->CopyFromHost(host); }

Result<Tensor> SimContext::CopyFromDevice(const Tensor& sent) {
  if (sent.host_accessible()) return device_->CopyFromHost(sent);
  if (sent.device() == device_->canonical_name()) return sent;
  ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(device_->allocator(), sent.dtype(), sent.shape()));
  if (sent.num_bytes() > 0) std::memcpy(t.raw_data(), sent.raw_data(), sent.num_bytes());
  device_->copies_between++;
  return t;
}

Status SimContext::CopyOnDevice(const Tensor& src, Tensor& dst) {
  if (src.host_accessible() || dst.host_accessible()) {
    return InvalidArgument("sim: CopyOnDevice of host memory");
  }
  device_->copies_on_device++;
  return DeviceContext::CopyOnDevice(src, dst);
}

}  // namespace dflow::sim
