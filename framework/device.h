// Device: where kernels run and tensors live. The runtime talks to every device type through this
// interface; a device type (framework/device_type.h) makes its devices and registers its kernels
// (framework/kernel.h), and needs nothing else from the runtime. The backends: ops/cpu/ (CPU),
// ops/cuda/ (GPU).
//
// What a device provides:
//   allocator()        its memory, under the device's limit (MemoryStats): the figure the
//                      placer plans with is the one the allocator enforces.
//   CopyFromHost/ToHost  moving tensors between host memory and the device's.
//   Synchronize()      waits for work the device has queued (a no-op on the CPU).
//   EnterRun/LeaveRun  bracket a partition's run on the calling thread (the CPU sets the
//                      thread's OpenMP team size there, sharing the thread budget between
//                      concurrent runs).
//   context()          handed to kernels (KernelContext::device_context).
//   step_threads()     the persistent threads that run the device's partitions of a step.
//   NewNodeTimer()     for profiling, a timer of nodes by the device's clock where the host's
//                      is wrong (a GPU queues its kernels); null: the host's clock is right.
#pragma once

#include <memory>
#include <string>

#include "framework/device_context.h"
#include "framework/device_options.h"
#include "framework/node_timer.h"
#include "framework/step_threads.h"
#include "framework/thread_pool.h"
#include "framework/variable_store.h"
#include "graph/allocator.h"
#include "graph/device_name.h"
#include "graph/tensor.h"

namespace dflow {

struct MemoryStats {
  size_t limit = 0;   // the most bytes the device's tensors may hold at once; 0: no limit
  size_t in_use = 0;  // bytes held now: tensors, variables, arenas, kernels' scratch space
  size_t peak = 0;    // the most held at once since the last ResetPeak
};

class Device {
 public:
  virtual ~Device() = default;
  const DeviceName& name() const { return name_; }
  // Canonical name, "/job:localhost/task:0/device:CPU:0".
  const std::string& canonical_name() const { return canonical_; }
  // "CPU" or "GPU": the key of the kernel registry and of the device factory.
  const std::string& type() const { return *name_.type; }
  // The process incarnation the device was created in (framework/rendezvous_key.h).
  uint64_t incarnation() const { return incarnation_; }

  virtual Allocator* allocator() = 0;
  virtual MemoryStats memory() const = 0;
  virtual void ResetPeak() = 0;

  // A copy of host tensor `host` in this device's memory. Host-memory devices share the buffer.
  virtual Result<Tensor> CopyFromHost(const Tensor& host) = 0;
  // A host copy of `tensor` (in this device's memory). Host-memory devices share the buffer.
  virtual Result<Tensor> CopyToHost(const Tensor& tensor) = 0;
  // Waits until the work queued on the device is done.
  virtual Status Synchronize() { return Status::OK(); }

  // Brackets a run of one of this device's partitions on the calling thread. EnterRun returns
  // a token that LeaveRun takes back.
  virtual int EnterRun() { return 0; }
  virtual void LeaveRun(int token) {}
  // Handed to kernels; null when the device has nothing to add.
  virtual DeviceContext* context() { return nullptr; }
  // A timer of one run's nodes on the device's clock (framework/node_timer.h); null when the
  // host's clock around Compute measures the node, as on the CPU.
  virtual std::unique_ptr<NodeTimer> NewNodeTimer() { return nullptr; }

  VariableStore* variables() { return &variables_; }
  // Threads beyond the caller's for running independent nodes; null when there are none.
  virtual ThreadPool* inter_op_pool() { return nullptr; }
  StepThreads* step_threads() { return &step_threads_; }

 protected:
  explicit Device(DeviceName name, std::function<void()> on_thread_start = nullptr);

 private:
  DeviceName name_;
  std::string canonical_;
  uint64_t incarnation_;
  VariableStore variables_;
  StepThreads step_threads_;
};

}  // namespace dflow
