// CPU MatMul on oneDNN's matmul primitive. Transposes are expressed as strides, so no data is
// moved before the multiply. Primitives live in the shared PrimitiveCache. Scratchpads are
// user-managed (one per call, from the device's allocator, so they count against its memory
// limit): oneDNN's default library scratchpad is shared and unsafe for concurrent runs.
#include "ops/common/matmul_kernel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/broadcast_add.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/gemv.h"
#include "ops/cpu/half.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/packed_weights.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

// MatMul and BatchMatMul: a [..., M, K] x b [..., K, N] with equal leading dimensions, which
// are flattened into one batch (1 for MatMul). _FusedMatMul adds a bias [N] (a oneDNN bias)
// and optionally a ReLU (a pass over the output that keeps NaN, which oneDNN's post-op drops) or
// a GELU (oneDNN's gelu_erf post-op: it gives NaN, infinities and -0 as the Gelu kernel's loop
// does, on AVX-512, AVX2 and SSE4.1 alike, within 6e-8 of the exact value elsewhere).
// A constant b (an imported model's weights) is packed into the primitive's own layout once, or,
// for one row of a (a classifier at batch 1), into GemvWeights' panels.
class MatMulKernel : public common::MatMulBase<MatMulKernel> {
 public:
  explicit MatMulKernel(const KernelInit& init)
      : MatMulBase(init), op_(init.node.op()), weights_(init, 1) {}
  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const MatMulDims& d) {
    const bool half = a.dtype() == DType::kBF16 || a.dtype() == DType::kF16;
    if (a.dtype() != DType::kF32 && a.dtype() != DType::kF64 && !half) {
      return InvalidArgument("no CPU {} for {} (f32, f64, bf16 or f16)", op_, a.dtype());
    }
    if (half && (epilogue_.bias || epilogue_.relu || epilogue_.gelu)) {
      return InvalidArgument("no CPU {} for {} with a bias or an activation (f32)", op_, a.dtype());
    }
    const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), d.out));
    if (out->num_elements() == 0) return Status::OK();
    if (k == 0) {
      std::memset(out->raw_data(), 0, out->num_bytes());
      if (epilogue_.bias) {  // the product is zero: bias, then the activation
        float* o = out->data<float>();
        const float* bias = ctx.input(2).data<float>();
        for (int64_t i = 0; i < out->num_elements(); ++i) o[i] = bias[i % n];
        if (epilogue_.relu) ReluKeepingNaN(o, out->num_elements());
        if (epilogue_.gelu) {
          for (int64_t i = 0; i < out->num_elements(); ++i) {
            o[i] = static_cast<float>(0.5 * o[i] * (1 + std::erf(o[i] * 0.70710678118654752440)));
          }
        }
      }
      return Status::OK();
    }
    if (half) return RunHalf(ctx, a, b, *out, d);
    if (a.dtype() == DType::kF64) {
      for (int64_t i = 0; i < batch; ++i) {
        MatMulF64(a.data<double>() + i * m * k, b.data<double>() + i * k * n,
                  out->data<double>() + i * m * n, m, k, n);
      }
      return Status::OK();
    }
    if (batch == 1 && m == 1 && weights_.constant() && !epilogue_.gelu && GemvPays(k, n)) {
      ASSIGN_OR_RETURN(Tensor panels, gemv_weights_.Get(b, k, n, tb_));
      Gemv(a.data<float>(), panels.data<float>(),
           epilogue_.bias ? ctx.input(2).data<float>() : nullptr, out->data<float>(), k, n);
      if (epilogue_.relu) ReluKeepingNaN(out->data<float>(), out->num_elements());
      return Status::OK();
    }
    std::shared_ptr<const Prim> p = Primitive(batch, m, k, n, weights_.constant());
    const bool matrix = weights_.constant() && batch == 1;
    const dnnl::memory::desc& scratch_desc = p->scratch;
    ASSIGN_OR_RETURN(PackedWeights::Packed packed,
                     weights_.Get(Desc(matrix, batch, k, n, tb_), p->weights, b, false));
    dnnl::memory am(Desc(matrix, batch, m, k, ta_), CpuEngine(), a.raw_data());
    dnnl::memory bm(p->weights, CpuEngine(),
                    const_cast<void*>(packed.data.raw_data() != nullptr ? packed.data.raw_data()
                                                                        : b.raw_data()));
    dnnl::memory cm(Desc(matrix, batch, m, n, false), CpuEngine(), out->raw_data());
    TempBuffers temp(ctx.allocator());
    ASSIGN_OR_RETURN(void* scratch_data, temp.Get(scratch_desc.get_size()));
    dnnl::memory scratch(scratch_desc, CpuEngine(), scratch_data);
    dnnl::stream& stream = ThreadStream();
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, am},
                                                  {DNNL_ARG_WEIGHTS, bm},
                                                  {DNNL_ARG_DST, cm},
                                                  {DNNL_ARG_SCRATCHPAD, scratch}};
    if (epilogue_.bias) {
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory(BiasDesc(matrix, n), CpuEngine(), ctx.input(2).raw_data()));
    }
    p->prim.execute(stream, args);
    stream.wait();
    // The ReLU after the product, not as oneDNN's post-op, which turns NaN into 0: a pass over
    // the output while it is in cache.
    if (epilogue_.relu) ReluKeepingNaN(out->data<float>(), out->num_elements());
    return Status::OK();
  }

 private:
  // oneDNN has no f64 matmul: a plain loop, i-p-j order so the inner loop runs along rows.
  void MatMulF64(const double* a, const double* b, double* c, int64_t m, int64_t k,
                 int64_t n) const {
    std::memset(c, 0, sizeof(double) * m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        double av = ta_ ? a[p * m + i] : a[i * k + p];
        double* row = c + i * n;
        if (tb_) {
          for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * k + p];
        } else {
          const double* brow = b + p * n;
          for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
        }
      }
    }
  }

  // bf16 or f16 operands and result with f32 accumulation: bf16 on oneDNN's own primitive (AMX
  // or AVX512-BF16 where the CPU has them; emulated on plain AVX-512); f16, for which oneDNN 2.6
  // has no CPU primitive, widened exactly to f32, multiplied there and rounded once, as a GPU's
  // f16 product with f32 accumulation rounds. Weights are not packed: a half-precision product
  // comes from the mixed-precision rewrite, whose weights are cast every step.
  Status RunHalf(KernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out,
                 const MatMulDims& d) const {
    TempBuffers temp(ctx.allocator());
    if (a.dtype() == DType::kBF16) {
      return RunPlain(temp, d, dnnl::memory::data_type::bf16, a.raw_data(), b.raw_data(),
                      out.raw_data(), a.dtype());
    }
    return WidenedF16(temp, a, b, out, [&](void* wa, void* wb, void* wc) {
      return RunPlain(temp, d, dnnl::memory::data_type::f32, wa, wb, wc, a.dtype());
    });
  }

  // c = a x b in `t`, all three stored plain (a batch of matrices, transposed as ta_, tb_ say),
  // without packing or epilogue. Unimplemented, naming `dtype`, where oneDNN has no primitive.
  Status RunPlain(TempBuffers& temp, const MatMulDims& d, dnnl::memory::data_type t, const void* a,
                  const void* b, void* c, DType dtype) const {
    const dnnl::memory::desc ad = Desc(false, d.batch, d.m, d.k, ta_, t),
                             bd = Desc(false, d.batch, d.k, d.n, tb_, t),
                             cd = Desc(false, d.batch, d.m, d.n, false, t);
    const std::string key = fmt::format("matmul_plain:{}:{}:{}:{}:{}:{}:{}", static_cast<int>(t),
                                        ta_, tb_, d.batch, d.m, d.k, d.n);
    std::shared_ptr<const Prim> p;
    try {
      p = PrimitiveCache::Global().GetOrCreate<Prim>(key, [&] {
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, CpuEngine());
        return std::make_shared<const Prim>(
            Prim{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()});
      });
    } catch (const dnnl::error&) {
      return Unimplemented("no CPU {} for {} on this processor (oneDNN has no such primitive)", op_,
                           dtype);
    }
    ASSIGN_OR_RETURN(void* scratch, temp.Get(p->scratch.get_size()));
    dnnl::stream& stream = ThreadStream();
    p->prim.execute(stream,
                    {{DNNL_ARG_SRC, dnnl::memory(ad, CpuEngine(), const_cast<void*>(a))},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(bd, CpuEngine(), const_cast<void*>(b))},
                     {DNNL_ARG_DST, dnnl::memory(cd, CpuEngine(), c)},
                     {DNNL_ARG_SCRATCHPAD, dnnl::memory(p->scratch, CpuEngine(), scratch)}});
    stream.wait();
    return Status::OK();
  }

  // A batch of logical [rows, cols] matrices stored row-major, or transposed (each stored as
  // [cols, rows]); as one 2-D matrix when `matrix` (a batch of 1 whose b is packed: oneDNN packs
  // 2-D weights only, 3-D "any" weights stay plain, and a plain [768, 3072] b took 1.6x as long
  // as the packed one; an unpacked b keeps the 3-D form, whose scratchpad is smaller).
  static dnnl::memory::desc Desc(bool matrix, int64_t batch, int64_t rows, int64_t cols,
                                 bool transposed,
                                 dnnl::memory::data_type t = dnnl::memory::data_type::f32) {
    if (matrix) {
      return dnnl::memory::desc(
          {rows, cols}, t, transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1});
    }
    dnnl::memory::dims strides = transposed ? dnnl::memory::dims{rows * cols, 1, rows}
                                            : dnnl::memory::dims{rows * cols, cols, 1};
    return dnnl::memory::desc({batch, rows, cols}, t, strides);
  }

  static dnnl::memory::desc BiasDesc(bool matrix, int64_t n) {
    if (matrix) {
      return dnnl::memory::desc({1, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, 1});
    }
    return dnnl::memory::desc({1, 1, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, n, 1});
  }

  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc scratch, weights;
  };

  // `pack`: b in the layout the primitive picks (a constant, packed once), else as stored.
  std::shared_ptr<const Prim> Primitive(int64_t batch, int64_t m, int64_t k, int64_t n,
                                        bool pack) const {
    std::string key = fmt::format("matmul:{}:{}:{}:{}:{}:{}:{}:{}:{}", ta_, tb_, epilogue_.bias,
                                  epilogue_.gelu, pack, batch, m, k, n);
    const bool matrix = pack && batch == 1;
    return PrimitiveCache::Global().GetOrCreate<Prim>(key, [&] {
      const dnnl::memory::desc b =
          pack ? dnnl::memory::desc(Desc(matrix, batch, k, n, tb_).dims(),
                                    dnnl::memory::data_type::f32, dnnl::memory::format_tag::any)
               : Desc(matrix, batch, k, n, tb_);
      auto desc = epilogue_.bias
                      ? dnnl::matmul::desc(Desc(matrix, batch, m, k, ta_), b, BiasDesc(matrix, n),
                                           Desc(matrix, batch, m, n, false))
                      : dnnl::matmul::desc(Desc(matrix, batch, m, k, ta_), b,
                                           Desc(matrix, batch, m, n, false));
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (epilogue_.gelu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
      return std::make_shared<const Prim>(
          Prim{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()});
    });
  }

  const std::string op_;
  PackedWeights weights_;
  GemvWeights gemv_weights_;
};

// _ScaledBatchMatMul: y = alpha * (a x b) + addend, the addend broadcast to the product: one
// oneDNN matmul with alpha as its output scale (free: 0.47 ms with or without it for BERT's
// scores at batch 8), then the addend added row by row. (oneDNN's binary post-op with the mask
// [B, 1, 1, S] broadcast took the same product from 0.47 to 0.87 ms.)
class ScaledBatchMatMulKernel : public OpKernel {
 public:
  explicit ScaledBatchMatMulKernel(const KernelInit& init)
      : ta_(std::get<bool>(*init.node.FindAttr("transpose_a"))),
        tb_(std::get<bool>(*init.node.FindAttr("transpose_b"))),
        alpha_(static_cast<float>(std::get<double>(*init.node.FindAttr("alpha")))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor& addend = ctx.input(2);
    if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || addend.dtype() != DType::kF32) {
      return InvalidArgument("no CPU _ScaledBatchMatMul for {} x {} + {} (f32)", a.dtype(),
                             b.dtype(), addend.dtype());
    }
    ASSIGN_OR_RETURN(MatMulDims d, MatMulShapes(a.shape(), b.shape(), ta_, tb_));
    const Shape& y = d.out;
    const int r = y.rank();
    // The addend's dimensions as the product's, 1 where it broadcasts.
    std::vector<int64_t> add_dims(r, 1);
    bool bad = addend.shape().rank() > r;
    for (int i = 1; !bad && i <= addend.shape().rank(); ++i) {
      const int64_t ad = addend.shape()[addend.shape().rank() - i];
      bad = ad != 1 && ad != y[r - i];
      add_dims[r - i] = ad;
    }
    if (bad) {
      return InvalidArgument("addend {} does not broadcast to the product {}", addend.shape(), y);
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kF32, y));
    if (out->num_elements() == 0) return Status::OK();
    if (d.k > 0) {
      std::shared_ptr<const Prim> p = Primitive(a.shape(), b.shape(), y);
      dnnl::memory am(p->a, CpuEngine(), a.raw_data()), bm(p->b, CpuEngine(), b.raw_data());
      dnnl::memory ym(p->y, CpuEngine(), out->raw_data());
      TempBuffers temp(ctx.allocator());
      ASSIGN_OR_RETURN(void* scratch_data, temp.Get(p->scratch.get_size()));
      dnnl::memory scratch(p->scratch, CpuEngine(), scratch_data);
      dnnl::stream& stream = ThreadStream();
      p->prim.execute(stream, {{DNNL_ARG_SRC, am},
                               {DNNL_ARG_WEIGHTS, bm},
                               {DNNL_ARG_DST, ym},
                               {DNNL_ARG_SCRATCHPAD, scratch}});
      stream.wait();
    } else {
      std::memset(out->raw_data(), 0, out->num_bytes());
    }
    // The sums' bound: a Softmax after the scores needs no finiteness pass.
    out->set_known_bound(
        AddBroadcastBounded(addend.data<float>(), add_dims, y, out->data<float>()));
    return Status::OK();
  }

 private:
  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, y, scratch;
  };

  // A batch of logical [rows, cols] matrices (the last two of `dims`) stored row-major, or
  // transposed (each stored as [cols, rows]), dense.
  static dnnl::memory::desc Desc(const std::vector<int64_t>& dims, bool transposed) {
    const int r = static_cast<int>(dims.size());
    dnnl::memory::dims strides(r);
    const int64_t rows = dims[r - 2], cols = dims[r - 1];
    strides[r - 1] = transposed ? rows : 1;
    strides[r - 2] = transposed ? 1 : cols;
    int64_t step = rows * cols;
    for (int i = r - 3; i >= 0; --i) {
      strides[i] = step;
      step *= dims[i];
    }
    return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()),
                              dnnl::memory::data_type::f32, strides);
  }

  // Logical dims: [..., m, k] of a stored [..., k, m] when transposed.
  static std::vector<int64_t> Logical(const Shape& s, bool transposed) {
    std::vector<int64_t> dims = s.dim_vector();
    if (transposed) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
    return dims;
  }

  std::shared_ptr<const Prim> Primitive(const Shape& a, const Shape& b, const Shape& y) const {
    std::string key = fmt::format("scaled_bmm:{}:{}:{}:{}:{}", ta_, tb_, alpha_,
                                  fmt::join(a.dim_vector(), ","), fmt::join(b.dim_vector(), ","));
    return PrimitiveCache::Global().GetOrCreate<Prim>(key, [&] {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_output_scales(0, {alpha_});
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(Desc(Logical(a, ta_), ta_), Desc(Logical(b, tb_), tb_),
                             Desc(y.dim_vector(), false)),
          attr, CpuEngine());
      // The descriptors as the primitive holds them (oneDNN normalises the strides of
      // dimensions of size 1, and execution wants its own).
      return std::make_shared<const Prim>(Prim{dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(),
                                               pd.dst_desc(), pd.scratchpad_desc()});
    });
  }

  const bool ta_, tb_;
  const float alpha_;
};

}  // namespace

Status RegisterMatMulKernels() {
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("MatMul", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("BatchMatMul", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("_FusedMatMul", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ScaledBatchMatMulKernel>("_ScaledBatchMatMul", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
