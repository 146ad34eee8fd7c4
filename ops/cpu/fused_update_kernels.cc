// CPU kernels of the fused ops that add a matrix product into an existing tensor
// (rewrite/fusion.h), each one oneDNN matmul with a sum post-op into the target's buffer:
//
// _MatMulApplySGD: var -= lr * (a x b), with a runtime output scale of -lr. The update is in
// place when no other reader holds the variable's value (variable_update.h); otherwise it goes
// to a fresh buffer, the old value added by a binary post-op (no copy first), so an earlier
// snapshot (a checkpoint's, say) never changes.
//
// _MatMulAdd: addend + a x b, in the addend's buffer when the kernel may overwrite it
// (ForwardOrAllocateOutput), else in a fresh one with the addend added by a binary post-op.
// One 1024 x 1024 weight gradient of 128 rows accumulated: 1.70 ms against 1.94 for the
// product and then an add (one thread).
#include <fmt/format.h>

#include <cstring>
#include <unordered_map>

#include "ops/common/variable_update.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {

using common::CheckInitialized;
using common::LookupVariable;
using common::UpdateTarget;
using common::VarRef;
namespace {

using dnnl::memory;

memory::desc MatrixDesc(int64_t rows, int64_t cols, bool transposed) {
  return memory::desc({rows, cols}, memory::data_type::f32,
                      transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

// dst = old + scale * (a x b) for a [m, k] and b [k, n] (after the transposes) as one oneDNN
// matmul: with `old` null, old is dst itself (a sum post-op); otherwise it is read from `old`
// (a binary add post-op, no copy first). `scale` null: 1.
Status AddProduct(KernelContext& ctx, const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t m,
                  int64_t k, int64_t n, const float* scale, const void* old, void* dst) {
  struct Prim {
    dnnl::matmul prim;
    memory::desc scratch;
  };
  const bool in_place = old == nullptr, scaled = scale != nullptr;
  const std::string key =
      fmt::format("matmul_add:{}:{}:{}:{}:{}:{}:{}", ta, tb, m, k, n, in_place, scaled);
  auto p = PrimitiveCache::Global().GetOrCreate<Prim>(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    dnnl::post_ops ops;
    if (in_place) {
      ops.append_sum(1.f);
    } else {
      ops.append_binary(dnnl::algorithm::binary_add, MatrixDesc(m, n, false));
    }
    attr.set_post_ops(ops);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(MatrixDesc(m, k, ta), MatrixDesc(k, n, tb), MatrixDesc(m, n, false)),
        attr, CpuEngine());
    return std::make_shared<const Prim>(Prim{dnnl::matmul(pd), pd.scratchpad_desc()});
  });
  const auto& e = CpuEngine();
  TempBuffers temp(ctx.allocator());
  ASSIGN_OR_RETURN(void* scratch_data, temp.Get(p->scratch.get_size()));
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(MatrixDesc(m, k, ta), e, const_cast<void*>(a.raw_data()))},
      {DNNL_ARG_WEIGHTS, memory(MatrixDesc(k, n, tb), e, const_cast<void*>(b.raw_data()))},
      {DNNL_ARG_DST, memory(MatrixDesc(m, n, false), e, dst)},
      {DNNL_ARG_SCRATCHPAD, memory(p->scratch, e, scratch_data)}};
  float scale_value = scaled ? *scale : 1.f;
  if (scaled) {
    args.emplace(
        DNNL_ARG_ATTR_OUTPUT_SCALES,
        memory(memory::desc({1}, memory::data_type::f32, memory::format_tag::x), e, &scale_value));
  }
  if (!in_place) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 memory(MatrixDesc(m, n, false), e, const_cast<void*>(old)));
  }
  dnnl::stream& s = ThreadStream();
  p->prim.execute(s, args);
  s.wait();
  return Status::OK();
}

class MatMulApplySGDKernel : public OpKernel {
 public:
  explicit MatMulApplySGDKernel(const KernelInit& init)
      : var_(LookupVariable(init, 0)),
        ta_(std::get<bool>(*init.node.FindAttr("transpose_a"))),
        tb_(std::get<bool>(*init.node.FindAttr("transpose_b"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& lr = ctx.input(1);
    const Tensor& a = ctx.input(2);
    const Tensor& b = ctx.input(3);
    if (a.shape().rank() != 2 || b.shape().rank() != 2) {
      return InvalidArgument("gradient factors must be matrices, got {} and {}", a.shape(),
                             b.shape());
    }
    int64_t m = a.shape()[ta_ ? 1 : 0], k = a.shape()[ta_ ? 0 : 1];
    int64_t kb = b.shape()[tb_ ? 1 : 0], n = b.shape()[tb_ ? 0 : 1];
    MutexLock lock(var_.var->mu);
    RETURN_IF_ERROR(CheckInitialized(var_));
    Tensor& cur = var_.var->value;
    if (k != kb || cur.shape() != Shape{m, n} || cur.dtype() != DType::kF32) {
      return InvalidArgument("gradient {}{} x {}{} does not match variable '{}' {}{}", a.shape(),
                             ta_ ? "^T" : "", b.shape(), tb_ ? "^T" : "", var_.name, cur.dtype(),
                             cur.shape());
    }
    if (lr.num_elements() != 1 || lr.dtype() != DType::kF32) {
      return InvalidArgument("learning rate must be a scalar f32");
    }
    ASSIGN_OR_RETURN(Tensor dst, UpdateTarget(ctx, var_));
    const bool in_place = dst.SharesBufferWith(cur);
    if (k == 0 && !in_place) std::memcpy(dst.raw_data(), cur.raw_data(), cur.num_bytes());
    if (k > 0 && m * n > 0) {
      const float scale = -lr.data<float>()[0];
      RETURN_IF_ERROR(AddProduct(ctx, a, ta_, b, tb_, m, k, n, &scale,
                                 in_place ? nullptr : cur.raw_data(), dst.raw_data()));
    }
    cur = dst;
    ctx.set_output(0, cur);
    return Status::OK();
  }

 private:
  VarRef var_;
  const bool ta_, tb_;
};

// _MatMulAdd (see the top of the file).
class MatMulAddKernel : public OpKernel {
 public:
  explicit MatMulAddKernel(const KernelInit& init)
      : ta_(std::get<bool>(*init.node.FindAttr("transpose_a"))),
        tb_(std::get<bool>(*init.node.FindAttr("transpose_b"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& addend = ctx.input(0);
    const Tensor& a = ctx.input(1);
    const Tensor& b = ctx.input(2);
    if (a.shape().rank() != 2 || b.shape().rank() != 2 || addend.dtype() != DType::kF32 ||
        a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
      return InvalidArgument("factors must be f32 matrices, got {} {} and {} {}", a.dtype(),
                             a.shape(), b.dtype(), b.shape());
    }
    const int64_t m = a.shape()[ta_ ? 1 : 0], k = a.shape()[ta_ ? 0 : 1];
    const int64_t kb = b.shape()[tb_ ? 1 : 0], n = b.shape()[tb_ ? 0 : 1];
    if (k != kb || addend.shape() != Shape{m, n}) {
      return InvalidArgument("{}{} x {}{} does not match the addend {}", a.shape(), ta_ ? "^T" : "",
                             b.shape(), tb_ ? "^T" : "", addend.shape());
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, DType::kF32, addend.shape()));
    const bool in_place = out->SharesBufferWith(addend);
    if (m * n == 0) return Status::OK();
    if (k == 0) {
      if (!in_place) std::memcpy(out->raw_data(), addend.raw_data(), addend.num_bytes());
      return Status::OK();
    }
    return AddProduct(ctx, a, ta_, b, tb_, m, k, n, nullptr, in_place ? nullptr : addend.raw_data(),
                      out->raw_data());
  }

 private:
  const bool ta_, tb_;
};

}  // namespace

Status RegisterFusedUpdateKernels() {
  RETURN_IF_ERROR(RegisterKernel<MatMulAddKernel>("_MatMulAdd", "CPU"));
  return RegisterKernel<MatMulApplySGDKernel>("_MatMulApplySGD", "CPU");
}

}  // namespace dflow::cpu
