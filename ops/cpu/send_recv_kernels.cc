// CPU kernels of _Send and _Recv over the step's rendezvous (framework/rendezvous.h). Each
// builds its key and the Recv's expectations once; a run only sets the step.
#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {
namespace {

class SendKernel : public OpKernel {
 public:
  explicit SendKernel(const KernelInit& init)
      : key_(RendezvousKeyOf(init.node, 0)), node_(init.node.name()) {}
  Status Compute(KernelContext& ctx) override {
    if (ctx.step().rendezvous == nullptr) {
      return FailedPrecondition("a Send runs only in a partitioned step");
    }
    RendezvousKey key = key_;
    key.step_id = ctx.step().step_id;
    return ctx.step().rendezvous->Send(key, SendArgs{node_}, ctx.input(0));
  }

 private:
  RendezvousKey key_;
  std::string node_;
};

class RecvKernel : public OpKernel {
 public:
  explicit RecvKernel(const KernelInit& init)
      : key_(RendezvousKeyOf(init.node, 0)), node_(init.node.name()) {
    args_.node = node_;
    args_.dtype = init.node.output_dtype(0);
    args_.shape = init.node.output_shape(0);
    args_.allocator = init.allocator;
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
        key, args_, [&ctx, done = std::move(done)](const Status& s, const Tensor& t) {
          if (s.ok()) ctx.set_output(0, t);
          done(s);
        });
  }

 private:
  RendezvousKey key_;
  std::string node_;
  RecvArgs args_;
};

}  // namespace

Status RegisterSendRecvKernels() {
  RETURN_IF_ERROR(RegisterKernel<SendKernel>("_Send", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<RecvKernel>("_Recv", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
