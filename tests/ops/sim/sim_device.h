// SimDevice: the stand-in device type "SIM" of the tests, a device whose memory is its own (as a
// GPU's is) on a machine without one. It keeps its tensors in separate buffers that claim not to
// be host memory and moves values only through its copies, which it counts, so sessions must
// copy feeds in and fetches out, constants in once, and Send/Recv across the host boundary.
// Underneath the buffers are host memory, so the CPU's kernels compute on them.
#pragma once

#include <atomic>
#include <string>

#include "framework/device.h"

namespace dflow::sim {

// Host memory underneath, but not host-accessible to anyone who asks.
class SimAllocator final : public Allocator {
 public:
  SimAllocator(std::string device, size_t limit);
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return memory_.device(); }
  bool host_accessible() const override { return false; }
  size_t limit() const override { return memory_.limit(); }
  size_t bytes_in_use() const override { return memory_.bytes_in_use(); }
  size_t peak_bytes() const { return memory_.peak_bytes(); }
  void ResetPeak() { memory_.ResetPeak(); }

 private:
  CpuAllocator memory_;
};

class SimDevice;

// What SIM's kernels see: its copies.
class SimContext final : public DeviceContext {
 public:
  explicit SimContext(SimDevice* device) : device_(device) {}
  Result<Tensor> CopyToHost(const Tensor& tensor) override;
  Result<Tensor> CopyFromHost(const Tensor& host) override;
  Status CopyOnDevice(const Tensor& src, Tensor& dst) override;
  // Between SIM devices of this process: the tensor itself, copied by the receiver.
  Result<Tensor> SendView(const Tensor& tensor) override { return tensor; }
  Result<Tensor> CopyFromDevice(const Tensor& sent) override;

 private:
  SimDevice* device_;
};

class SimDevice final : public Device {
 public:
  // `limit` 0: 64 MiB.
  SimDevice(const DeviceName& name, size_t limit);
  Allocator* allocator() override { return allocator_.get(); }
  MemoryStats memory() const override;
  void ResetPeak() override { allocator_->ResetPeak(); }
  Result<Tensor> CopyFromHost(const Tensor& host) override;
  Result<Tensor> CopyToHost(const Tensor& t) override;
  DeviceContext* context() override { return &context_; }

  // What moved, for tests to count.
  std::atomic<int> copies_in{0};
  std::atomic<int> copies_out{0};
  std::atomic<int> copies_on_device{0};
  std::atomic<int> copies_between{0};  // from another SIM device
  // Set by a test: copies out fail (Internal naming SIM).
  std::atomic<bool> refuse_copies_out{false};

 private:
  AllocatorPtr<SimAllocator> allocator_;
  SimContext context_;
};

}  // namespace dflow::sim
