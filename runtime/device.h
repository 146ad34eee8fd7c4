// Device: where kernels run and tensors live. A CPU device owns its allocator, its variables,
// and its share of the CPU thread budget.
//
// The thread budget. oneDNN here runs its kernels on OpenMP, and every thread that runs a
// kernel starts its own OpenMP team, so the executor's threads and the OpenMP teams multiply.
// dflow splits the cores the user allows (num_threads, default: all) deliberately:
//   inter_op_threads  threads that run independent nodes at once (the caller's thread counts
//                     as one; the rest form the device's pool). Default 1: dense kernels scale
//                     well inside oneDNN, and cheap nodes run inline anyway.
//   intra_op_threads  the OpenMP team size of each of them = num_threads / inter_op_threads.
// So inter_op_threads * intra_op_threads <= num_threads always holds. A graph with many
// independent mid-sized nodes may run faster with inter_op_threads = 2 or more.
#pragma once

#include <memory>
#include <string>

#include "graph/allocator.h"
#include "graph/device_name.h"
#include "ops/variable_store.h"
#include "runtime/thread_pool.h"

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

class Device {
 public:
  virtual ~Device() = default;
  const DeviceName& name() const { return name_; }
  // Canonical name, "/job:localhost/task:0/device:CPU:0".
  const std::string& canonical_name() const { return canonical_; }
  // "CPU" or "GPU": the key of the kernel registry.
  const std::string& type() const { return *name_.type; }
  virtual Allocator* allocator() = 0;
  VariableStore* variables() { return &variables_; }
  // Threads beyond the caller's for running independent nodes; null when there are none.
  virtual ThreadPool* inter_op_pool() { return nullptr; }
  // OpenMP team size for kernels started on this device.
  virtual int intra_op_threads() const { return 1; }

 protected:
  explicit Device(DeviceName name) : name_(std::move(name)), canonical_(name_.ToString()) {}

 private:
  DeviceName name_;
  std::string canonical_;
  VariableStore variables_;
};

class CpuDevice final : public Device {
 public:
  // REQUIRES: name is fully specified with type CPU.
  static Result<std::unique_ptr<CpuDevice>> Create(const DeviceName& name,
                                                   const ThreadBudget& budget);
  Allocator* allocator() override { return allocator_.get(); }
  CpuAllocator* cpu_allocator() { return allocator_.get(); }
  ThreadPool* inter_op_pool() override { return pool_.get(); }
  int intra_op_threads() const override { return split_.intra_op_threads; }
  const ThreadBudget::Split& split() const { return split_; }

 private:
  CpuDevice(const DeviceName& name, ThreadBudget::Split split);
  AllocatorPtr<CpuAllocator> allocator_;
  ThreadBudget::Split split_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace dflow
