// CpuDevice: a share of this machine's cores and memory. Several virtual CPU devices ("cpu:0",
// "cpu:1", ...) split the thread budget between them.
//
// The thread budget. oneDNN here runs its kernels on OpenMP, and every thread that runs a
// kernel starts its own OpenMP team, so the executor's threads and the OpenMP teams multiply.
// dflow splits the cores the user allows (num_threads, default: all) deliberately:
//   inter_op_threads  threads that run independent nodes at once (the thread running the
//                     partition counts as one; the rest form the device's pool). Default 1:
//                     dense kernels scale well inside oneDNN, and cheap nodes run inline anyway.
//   intra_op_threads  the OpenMP team size of each of them = num_threads / inter_op_threads.
// So inter_op_threads * intra_op_threads <= num_threads always holds. Concurrent runs on one
// device share it: with k runs in progress each thread entering a run gets a team of
// intra_op_threads / k (at least 1). A graph with many independent mid-sized nodes may run
// faster with inter_op_threads = 2 or more.
#pragma once

#include <atomic>
#include <memory>

#include "runtime/device.h"

namespace dflow {

struct ThreadBudget {
  int num_threads = 0;       // 0: every core of the machine
  int inter_op_threads = 0;  // 0: 1

  // The budget with defaults filled in and the split computed. InvalidArgument for negative
  // values or more inter-op threads than cores.
  struct Split {
    int num_threads;
    int inter_op_threads;
    int intra_op_threads;
  };
  Result<Split> Resolve() const;
};

// The machine's physical memory in bytes: a CPU device's default limit.
size_t PhysicalMemoryBytes();

class CpuDevice final : public Device {
 public:
  // REQUIRES: name is fully specified with type CPU. `memory_limit` 0: PhysicalMemoryBytes().
  static Result<std::unique_ptr<CpuDevice>> Create(const DeviceName& name,
                                                   const ThreadBudget& budget,
                                                   size_t memory_limit = 0);
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
