// OpKernel: the code that runs one node on one device type, and KernelRegistry, which maps
// (op, device type) to a kernel factory. The runtime creates one kernel per node when it
// compiles a plan, then calls Compute once per run of that node.
#pragma once

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/device_context.h"
#include "framework/rendezvous.h"
#include "framework/variable_store.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace dflow {

// Where a run puts node outputs when it follows a memory plan (runtime/memory_plan.h).
class OutputMemory {
 public:
  virtual ~OutputMemory() = default;
  // The allocator whose next Allocate on this thread gives the buffer of value slot `slot`
  // (`bytes` long), or null to use the device's allocator.
  virtual Allocator* ForOutput(int slot, size_t bytes) = 0;
};

// What a kernel sees while it runs: its inputs and outputs by slot, and its device's allocator.
// Inputs live in the executor's value array; a kernel never keeps pointers to them past Compute.
class KernelContext {
 public:
  KernelContext(Tensor* values, const int* input_slots, int num_inputs, Tensor* outputs,
                int num_outputs, Allocator* allocator, const int32_t* remaining_uses)
      : values_(values),
        input_slots_(input_slots),
        num_inputs_(num_inputs),
        outputs_(outputs),
        num_outputs_(num_outputs),
        allocator_(allocator),
        remaining_uses_(remaining_uses) {}

  int num_inputs() const { return num_inputs_; }
  const Tensor& input(int i) const { return values_[input_slots_[i]]; }
  int num_outputs() const { return num_outputs_; }
  void set_output(int i, Tensor t) { outputs_[i] = std::move(t); }
  const Tensor& output(int i) const { return outputs_[i]; }
  Allocator* allocator() const { return allocator_; }
  // The device's context (a CUDA device's streams); null on the CPU.
  DeviceContext* device_context() const { return device_context_; }
  void set_device_context(DeviceContext* c) { device_context_ = c; }
  // Scratch memory for the kernel's own use during Compute, from the device's allocator, so it
  // counts against the device's memory limit. ResourceExhausted names the device and size.
  Result<Tensor> AllocateTemp(size_t bytes);

  // True when this node is the last reader of input i's value in this run (and reads it once).
  bool IsLastUse(int i) const;
  // Allocates output i on the device. ResourceExhausted names the device and size.
  Result<Tensor*> AllocateOutput(int i, DType dtype, const Shape& shape);
  // The step this run belongs to (never null while a kernel runs).
  const StepInfo& step() const { return *step_; }
  void set_step(const StepInfo* step) { step_ = step; }
  // Outputs go through `memory` (when not null); output i is value slot output_base + i.
  void set_output_memory(OutputMemory* memory, int output_base) {
    output_memory_ = memory;
    output_base_ = output_base;
  }
  // Reuses input `in`'s buffer for output `out` when this node is its last reader and no one
  // else holds it (element-wise ops then run in place); allocates otherwise.
  Result<Tensor*> ForwardOrAllocateOutput(int in, int out, DType dtype, const Shape& shape);

 private:
  Tensor* values_;
  const int* input_slots_;
  int num_inputs_;
  Tensor* outputs_;
  int num_outputs_;
  Allocator* allocator_;
  const int32_t* remaining_uses_;  // per value slot; null: never forward
  DeviceContext* device_context_ = nullptr;
  OutputMemory* output_memory_ = nullptr;
  int output_base_ = 0;
  const StepInfo* step_ = &kNoStep;
  static inline const StepInfo kNoStep{};
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Runs the node. Errors need not name the node: the executor adds
  // "node 'NAME' (OP) on DEVICE: " in front.
  virtual Status Compute(KernelContext& ctx) = 0;

  // Asynchronous kernels (Recv) return true and implement ComputeAsync, which must call `done`
  // exactly once, from any thread; `ctx` stays valid until then. The executor does not wait:
  // the node's successors run when `done` comes.
  virtual bool IsAsync() const { return false; }
  virtual void ComputeAsync(KernelContext& ctx, std::function<void(Status)> done) {
    done(Compute(ctx));
  }
};

// What a kernel factory gets when the runtime compiles a plan.
struct KernelInit {
  const Graph& graph;
  const Node& node;
  std::string device;        // canonical device name
  Allocator* allocator;      // the device's memory
  VariableStore* variables;  // the device's variables
  DeviceContext* device_context = nullptr;
};

using KernelFactory = std::function<Result<std::unique_ptr<OpKernel>>(const KernelInit&)>;

class KernelRegistry {
 public:
  static KernelRegistry& Global();

  // InvalidArgument when a kernel for (op, device_type) is already registered.
  Status Register(const std::string& op, const std::string& device_type, KernelFactory factory);
  // Null when none is registered.
  const KernelFactory* Find(const std::string& op, const std::string& device_type) const;
  // Device types ("CPU", "GPU") with a kernel for `op`, sorted.
  std::vector<std::string> DeviceTypesFor(const std::string& op) const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::unordered_map<std::string, KernelFactory>> kernels_;
};

// Registers a kernel class whose constructor takes (const KernelInit&) and cannot fail.
template <typename K>
Status RegisterKernel(const std::string& op, const std::string& device_type) {
  return KernelRegistry::Global().Register(
      op, device_type, [](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
        return std::unique_ptr<OpKernel>(std::make_unique<K>(init));
      });
}

}  // namespace dflow
