// CPU kernels of RandomUniform and RandomNormal: a generator seeded from the node's seed on
// every run, so the values are the same each time (reproducible initialisation); and of
// UniformLike, a stream that goes on from run to run.
#include <mutex>
#include <random>

#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {
namespace {

template <bool kNormal>
class RandomKernel : public OpKernel {
 public:
  explicit RandomKernel(const KernelInit& init)
      : shape_(std::get<Shape>(*init.node.FindAttr("shape"))),
        dtype_(std::get<DType>(*init.node.FindAttr("dtype"))),
        seed_(static_cast<uint64_t>(std::get<int64_t>(*init.node.FindAttr("seed")))),
        a_(std::get<double>(*init.node.FindAttr(kNormal ? "mean" : "minval"))),
        b_(std::get<double>(*init.node.FindAttr(kNormal ? "stddev" : "maxval"))) {}

  Status Compute(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype_, shape_));
    std::mt19937_64 gen(seed_);
    auto fill = [&](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      if constexpr (kNormal) {
        std::normal_distribution<double> dist(a_, b_);
        for (int64_t i = 0, n = out->num_elements(); i < n; ++i) p[i] = static_cast<T>(dist(gen));
      } else {
        std::uniform_real_distribution<double> dist(a_, b_);
        for (int64_t i = 0, n = out->num_elements(); i < n; ++i) p[i] = static_cast<T>(dist(gen));
      }
    };
    if (dtype_ == DType::kF32) {
      fill(out->data<float>());
    } else {
      fill(out->data<double>());
    }
    return Status::OK();
  }

 private:
  Shape shape_;
  DType dtype_;
  uint64_t seed_;
  double a_, b_;
};

// NumPy's legacy RandomState stream: MT19937 seeded by init_genrand (std::mt19937's seeding),
// each double from two 32-bit draws (27 and 26 bits). The generator lives with the kernel, so
// successive runs continue the stream.
class UniformLikeKernel : public OpKernel {
 public:
  explicit UniformLikeKernel(const KernelInit& init)
      : dtype_(std::get<DType>(*init.node.FindAttr("dtype"))),
        gen_(static_cast<uint32_t>(std::get<int64_t>(*init.node.FindAttr("seed")))) {}

  Status Compute(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype_, ctx.input(0).shape()));
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 0, n = out->num_elements(); i < n; ++i) {
      const double a = gen_() >> 5, b = gen_() >> 6;
      const double u = (a * 67108864.0 + b) / 9007199254740992.0;
      if (dtype_ == DType::kF32) {
        out->data<float>()[i] = static_cast<float>(u);
      } else {
        out->data<double>()[i] = u;
      }
    }
    return Status::OK();
  }

 private:
  DType dtype_;
  std::mutex mu_;
  std::mt19937 gen_;
};

}  // namespace

Status RegisterRandomKernels() {
  RETURN_IF_ERROR(RegisterKernel<RandomKernel<false>>("RandomUniform", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<RandomKernel<true>>("RandomNormal", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UniformLikeKernel>("UniformLike", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
