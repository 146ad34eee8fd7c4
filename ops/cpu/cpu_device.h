// CpuDevice: a share of this machine's cores and memory, the "CPU" device type
// (ops/cpu/cpu_backend.h registers it). Several virtual CPU devices ("cpu:0", "cpu:1", ...) split
// the thread budget between them (framework/device_options.h). Concurrent runs on one device
// share it: with k runs in progress each thread entering a run gets an OpenMP team of
// intra_op_threads / k (at least 1).
#pragma once

#include <atomic>
#include <memory>

#include "framework/device.h"

namespace dflow {

// The machine's physical memory in bytes: a CPU device's default limit.
size_t PhysicalMemoryBytes();

class CpuDevice final : public Device {
 public:
  // InvalidArgument unless `name` is a full CPU device name. `options.memory_limit` 0:
  // PhysicalMemoryBytes().
  static Result<std::unique_ptr<CpuDevice>> Create(const DeviceName& name,
                                                   const DeviceOptions& options = {});
  Allocator* allocator() override { return allocator_.get(); }
  CpuAllocator* cpu_allocator() { return allocator_.get(); }
  MemoryStats memory() const override;
  void ResetPeak() override { allocator_->ResetPeak(); }
  Result<Tensor> CopyFromHost(const Tensor& host) override { return host; }
  Result<Tensor> CopyToHost(const Tensor& tensor) override { return tensor; }
  int EnterRun() override;
  void LeaveRun(int token) override;
  ThreadPool* inter_op_pool() override { return pool_.get(); }
  int intra_op_threads() const { return split_.intra_op_threads; }
  const ThreadBudget::Split& split() const { return split_; }

 private:
  CpuDevice(const DeviceName& name, ThreadBudget::Split split, size_t memory_limit);
  AllocatorPtr<CpuAllocator> allocator_;
  ThreadBudget::Split split_;
  std::unique_ptr<ThreadPool> pool_;
  std::atomic<int> active_runs_{0};
};

}  // namespace dflow
