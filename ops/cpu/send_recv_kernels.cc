// CPU kernels of _Send and _Recv over the step's rendezvous.
#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {
namespace {

struct Key {
  std::string src, dst, tensor;
  int64_t incarnation;

  explicit Key(const Node& n)
      : src(std::get<std::string>(*n.FindAttr("send_device"))),
        dst(std::get<std::string>(*n.FindAttr("recv_device"))),
        tensor(std::get<std::string>(*n.FindAttr("tensor_name"))),
        incarnation(std::get<int64_t>(*n.FindAttr("send_device_incarnation"))) {}

  std::string For(const StepInfo& step) const {
    return RendezvousKey(src, incarnation, dst, tensor, step.step_id);
  }
};

class SendKernel : public OpKernel {
 public:
  explicit SendKernel(const KernelInit& init) : key_(init.node) {}
  Status Compute(KernelContext& ctx) override {
    if (ctx.step().rendezvous == nullptr) {
      return FailedPrecondition("a Send runs only in a partitioned step");
    }
    return ctx.step().rendezvous->Send(key_.For(ctx.step()), ctx.input(0));
  }

 private:
  Key key_;
};

class RecvKernel : public OpKernel {
 public:
  explicit RecvKernel(const KernelInit& init) : key_(init.node) {}
  Status Compute(KernelContext&) override {
    return Internal("Recv is asynchronous: ComputeAsync runs it");
  }
  bool IsAsync() const override { return true; }
  void ComputeAsync(KernelContext& ctx, std::function<void(Status)> done) override {
    if (ctx.step().rendezvous == nullptr) {
      done(FailedPrecondition("a Recv runs only in a partitioned step"));
      return;
    }
    ctx.step().rendezvous->RecvAsync(
        key_.For(ctx.step()), [&ctx, done = std::move(done)](const Status& s, const Tensor& t) {
          if (s.ok()) ctx.set_output(0, t);
          done(s);
        });
  }

 private:
  Key key_;
};

}  // namespace

Status RegisterSendRecvKernels() {
  RETURN_IF_ERROR(RegisterKernel<SendKernel>("_Send", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<RecvKernel>("_Recv", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
