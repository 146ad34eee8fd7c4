#include "ops/common/common_kernels.h"

#include <vector>

#include "framework/kernel.h"
#include "graph/device_name.h"

namespace dflow::common {
namespace {

// The device's context, or host memory's where the device has none (the CPU).
DeviceContext& ContextOf(DeviceContext* context) {
  return context != nullptr ? *context : HostMemoryContext();
}

// The executor stores a fed value (in the device's memory) in the placeholder's output slot
// before the run.
class PlaceholderKernel : public OpKernel {
 public:
  explicit PlaceholderKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    if (!ctx.output(0).valid()) return FailedPrecondition("placeholder was not fed");
    return Status::OK();
  }
};

// The value is copied into the device's memory once, when the plan is compiled.
class ConstKernel : public OpKernel {
 public:
  static Result<std::unique_ptr<OpKernel>> Create(const KernelInit& init) {
    const Tensor& value = std::get<Tensor>(*init.node.FindAttr("value"));
    Tensor on_device = value;
    if (init.allocator != nullptr && !init.allocator->host_accessible()) {
      auto copied = ContextOf(init.device_context).CopyFromHost(value);
      if (!copied.ok()) {
        return copied.status().WithPrefix(
            fmt::format("Const '{}': copying its value to {}: ", init.node.name(), init.device));
      }
      on_device = std::move(copied).value();
    }
    return std::unique_ptr<OpKernel>(new ConstKernel(std::move(on_device)));
  }
  Status Compute(KernelContext& ctx) override {
    ctx.set_output(0, value_);
    return Status::OK();
  }

 private:
  explicit ConstKernel(Tensor value) : value_(std::move(value)) {}
  Tensor value_;
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    ctx.set_output(0, ctx.input(0));
    return Status::OK();
  }
};

class NoOpKernel : public OpKernel {
 public:
  explicit NoOpKernel(const KernelInit&) {}
  Status Compute(KernelContext&) override { return Status::OK(); }
};

class ReshapeKernel : public OpKernel {
 public:
  explicit ReshapeKernel(const KernelInit& init)
      : dims_(std::get<std::vector<int64_t>>(*init.node.FindAttr("shape"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> dims = dims_;
    int64_t known = 1;
    int unknown = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] < 0) {
        unknown = static_cast<int>(i);
      } else {
        known *= dims[i];
      }
    }
    int64_t n = x.num_elements();
    if (unknown >= 0 && known > 0 && n % known == 0) dims[unknown] = n / known;
    Shape out(dims);
    if (out.num_elements() != n) {
      return InvalidArgument("cannot reshape {} ({} elements) into {}", x.shape(), n, Shape(dims_));
    }
    ctx.set_output(0, x.Reshaped(out));
    return Status::OK();
  }

 private:
  std::vector<int64_t> dims_;
};

class ReshapeLikeKernel : public OpKernel {
 public:
  explicit ReshapeLikeKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.num_elements() != like.num_elements()) {
      return InvalidArgument("cannot reshape {} into {}", x.shape(), like);
    }
    ctx.set_output(0, x.Reshaped(like));
    return Status::OK();
  }
};

class VariableKernel : public OpKernel {
 public:
  explicit VariableKernel(const KernelInit& init)
      : var_(init.variables->GetOrCreate(init.node.name())) {}
  // Outputs the current value, or nothing when uninitialised: the executor then tells the
  // reading node that the variable is uninitialised (Assign alone may take it so).
  Status Compute(KernelContext& ctx) override {
    MutexLock lock(var_->mu);
    ctx.set_output(0, var_->value);
    return Status::OK();
  }

 private:
  VariableStore::Variable* var_;
};

// Assign on a device whose memory is its own: the variable takes the value's buffer when
// nobody else reads it (an initializer's output, most often), or a copy made on the device.
// Never in place, so a reader holding the old value keeps it whole.
class DeviceAssignKernel : public OpKernel {
 public:
  explicit DeviceAssignKernel(const KernelInit& init)
      : name_(init.graph.node(init.node.inputs()[0].node).name()),
        var_(init.variables->GetOrCreate(name_)),
        validate_shape_(std::get<bool>(*init.node.FindAttr("validate_shape"))),
        declared_(init.graph.node(init.node.inputs()[0].node).output_shape(0)),
        context_(init.device_context) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& value = ctx.input(1);
    if (validate_shape_ && value.shape() != declared_) {
      return InvalidArgument("cannot assign a value of shape {} to variable '{}' of shape {}",
                             value.shape(), name_, declared_);
    }
    DeviceContext& device = ContextOf(context_);
    Tensor next;
    if (value.host_accessible() && !ctx.allocator()->host_accessible()) {
      ASSIGN_OR_RETURN(next, device.CopyFromHost(value));
    } else if (ctx.IsLastUse(1) && value.buffer_unique() &&
               value.device() == ctx.allocator()->device()) {
      next = value;
    } else {
      ASSIGN_OR_RETURN(next, Tensor::Allocate(ctx.allocator(), value.dtype(), value.shape()));
      RETURN_IF_ERROR(device.CopyOnDevice(value, next));
    }
    next.clear_known_bound();  // a variable's buffer is updated in place later
    MutexLock lock(var_->mu);
    var_->value = std::move(next);
    ctx.set_output(0, var_->value);
    return Status::OK();
  }

 private:
  std::string name_;
  VariableStore::Variable* var_;
  bool validate_shape_;
  Shape declared_;
  DeviceContext* context_;
};

// A Send hands the rendezvous host memory: a tensor in device memory is copied out first (the
// host waits for it), so every rendezvous, in-process or over a transport, sees host tensors;
// except between devices of one process when the Recv is on a device whose memory is its own
// (a GPU), where the tensor goes as its device's SendView and the Recv copies it in without the
// host waiting.
class SendKernel : public OpKernel {
 public:
  explicit SendKernel(const KernelInit& init)
      : key_(RendezvousKeyOf(init.node, 0)),
        node_(init.node.name()),
        context_(init.device_context) {
    auto recv = DeviceName::Parse(key_.dst_device);
    to_device_memory_ = recv.ok() && recv->type.has_value() && *recv->type != "CPU";
  }
  Status Compute(KernelContext& ctx) override {
    Rendezvous* rendezvous = ctx.step().rendezvous;
    if (rendezvous == nullptr) return FailedPrecondition("a Send runs only in a partitioned step");
    RendezvousKey key = key_;
    key.step_id = ctx.step().step_id;
    const Tensor& value = ctx.input(0);
    if (value.host_accessible()) return rendezvous->Send(key, SendArgs{node_}, value);
    // A device whose memory is its own (a GPU) of this process, or of another process of this
    // host, takes the tensor as it is and copies it in itself (GPUs peer to peer, or by CUDA IPC).
    if (to_device_memory_ && rendezvous->TakesDeviceMemory(key)) {
      ASSIGN_OR_RETURN(Tensor view, ContextOf(context_).SendView(value));
      return rendezvous->Send(key, SendArgs{node_}, view);
    }
    ASSIGN_OR_RETURN(Tensor host, ContextOf(context_).CopyToHost(value));
    return rendezvous->Send(key, SendArgs{node_}, host);
  }

 private:
  RendezvousKey key_;
  std::string node_;
  DeviceContext* context_;
  bool to_device_memory_ = false;  // the Recv is on a device whose memory is its own
};

// A Recv on a device whose memory is its own receives into host memory (or, from a device of
// this process, the sender's SendView) and copies the tensor in, queued on the device.
class RecvKernel : public OpKernel {
 public:
  explicit RecvKernel(const KernelInit& init)
      : key_(RendezvousKeyOf(init.node, 0)),
        node_(init.node.name()),
        context_(init.device_context),
        staged_(init.allocator != nullptr && !init.allocator->host_accessible()) {
    args_.node = node_;
    args_.dtype = init.node.output_dtype(0);
    args_.shape = init.node.output_shape(0);
    args_.allocator = staged_ ? CpuAllocator::Default() : init.allocator;
    args_.accepts_device_memory = staged_;
  }
  Status Compute(KernelContext&) override {
    return Internal("Recv is asynchronous: ComputeAsync runs it");
  }
  bool IsAsync() const override { return true; }
  void ComputeAsync(KernelContext& ctx, std::function<void(Status)> done) override {
    if (ctx.step().rendezvous == nullptr) {
      done(FailedPrecondition("a Recv runs only in a partitioned step"));
      return;
    }
    RendezvousKey key = key_;
    key.step_id = ctx.step().step_id;
    ctx.step().rendezvous->RecvAsync(
        key, args_, [this, &ctx, done = std::move(done)](const Status& s, const Tensor& t) {
          if (!s.ok()) {
            done(s);
            return;
          }
          if (!staged_) {
            ctx.set_output(0, t);
            done(Status::OK());
            return;
          }
          auto on_device = ContextOf(context_).CopyFromDevice(t);
          if (on_device.ok()) ctx.set_output(0, std::move(on_device).value());
          done(on_device.status());
        });
  }

 private:
  RendezvousKey key_;
  std::string node_;
  DeviceContext* context_;
  bool staged_;  // the device's memory is its own: receive into host memory, then copy in
  RecvArgs args_;
};

// An op without inputs computed by another device type's kernel in host memory (the CPU's),
// its outputs then copied in: for random initializers, whose values are then the CPU's to the
// bit, and which run once, not every step.
class HostComputedKernel : public OpKernel {
 public:
  static Result<std::unique_ptr<OpKernel>> Create(const KernelInit& init,
                                                  const std::string& host_type) {
    const KernelFactory* factory = KernelRegistry::Global().Find(init.node.op(), host_type);
    if (factory == nullptr) {
      return NotFound("no {} kernel of {} to compute '{}' in host memory", host_type,
                      init.node.op(), init.node.name());
    }
    KernelInit host = init;
    host.allocator = CpuAllocator::Default();
    host.device_context = nullptr;
    ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel, (*factory)(host));
    return std::unique_ptr<OpKernel>(
        new HostComputedKernel(std::move(kernel), init.device_context));
  }
  Status Compute(KernelContext& ctx) override {
    std::vector<Tensor> outputs(ctx.num_outputs());
    KernelContext host(nullptr, nullptr, 0, outputs.data(), ctx.num_outputs(),
                       CpuAllocator::Default(), nullptr);
    host.set_step(&ctx.step());
    RETURN_IF_ERROR(host_->Compute(host));
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      ASSIGN_OR_RETURN(Tensor on_device, ContextOf(context_).CopyFromHost(outputs[i]));
      ctx.set_output(i, std::move(on_device));
    }
    return Status::OK();
  }

 private:
  HostComputedKernel(std::unique_ptr<OpKernel> host, DeviceContext* context)
      : host_(std::move(host)), context_(context) {}
  std::unique_ptr<OpKernel> host_;
  DeviceContext* context_;
};

}  // namespace

Status RegisterHostComputed(const std::string& op, const std::string& device_type,
                            const std::string& host_type) {
  return KernelRegistry::Global().Register(
      op, device_type, [host_type](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
        if (init.node.num_inputs() != 0) {
          return InvalidArgument(
              "'{}' ({}) has inputs; only ops without inputs are computed in "
              "host memory for {}",
              init.node.name(), init.node.op(), init.device);
        }
        return HostComputedKernel::Create(init, host_type);
      });
}

Status RegisterCommonKernels(const std::string& type) {
  RETURN_IF_ERROR(RegisterKernel<PlaceholderKernel>("Placeholder", type));
  RETURN_IF_ERROR(KernelRegistry::Global().Register("Const", type, &ConstKernel::Create));
  RETURN_IF_ERROR(RegisterKernel<IdentityKernel>("Identity", type));
  RETURN_IF_ERROR(RegisterKernel<NoOpKernel>("NoOp", type));
  RETURN_IF_ERROR(RegisterKernel<ReshapeKernel>("Reshape", type));
  RETURN_IF_ERROR(RegisterKernel<ReshapeLikeKernel>("ReshapeLike", type));
  RETURN_IF_ERROR(RegisterKernel<VariableKernel>("Variable", type));
  RETURN_IF_ERROR(RegisterKernel<SendKernel>("_Send", type));
  RETURN_IF_ERROR(RegisterKernel<RecvKernel>("_Recv", type));
  return Status::OK();
}

Status RegisterDeviceMemoryKernels(const std::string& type) {
  RETURN_IF_ERROR(RegisterCommonKernels(type));
  RETURN_IF_ERROR(RegisterKernel<DeviceAssignKernel>("Assign", type));
  // Random initializers: the CPU's values, copied in.
  RETURN_IF_ERROR(RegisterHostComputed("RandomUniform", type));
  return RegisterHostComputed("RandomNormal", type);
}

}  // namespace dflow::common
