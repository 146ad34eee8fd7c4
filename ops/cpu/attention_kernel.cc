// CPU _Attention: softmax(alpha * q k^T + mask) v for every batch and head, as three passes:
// the scores of all heads in one oneDNN matmul that reads each head's queries and keys where
// they lie in the projections' rows (strides, no Transpose), the mask added and the softmax
// taken in one pass over each row (ops/cpu/softmax_rows.h), then one matmul of the
// probabilities and the values that writes each head's output into its columns of
// [B, S, heads, value_dim].
#include <fmt/format.h>

#include <cstring>

#include "ops/attention_dims.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/primitive_cache.h"
#include "ops/cpu/softmax_rows.h"

namespace dflow::cpu {
namespace {

class AttentionKernel : public OpKernel {
 public:
  explicit AttentionKernel(const KernelInit& init)
      // The graph's validation checked the attributes (the op's shape function reads them).
      : attrs_(AttentionAttrsOf(init.node).value()),
        alpha_(static_cast<float>(std::get<double>(*init.node.FindAttr("alpha")))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& q = ctx.input(0);
    const Tensor& k = ctx.input(1);
    const Tensor& v = ctx.input(2);
    const Tensor& mask = ctx.input(3);
    for (const Tensor* t : {&q, &k, &v, &mask}) {
      if (t->dtype() != DType::kF32) {
        return InvalidArgument("no CPU _Attention for {}, {}, {} and a {} mask (f32)", q.dtype(),
                               k.dtype(), v.dtype(), mask.dtype());
      }
    }
    ASSIGN_OR_RETURN(AttentionDims d,
                     AttentionShapes(q.shape(), k.shape(), v.shape(), mask.shape(), attrs_));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kF32, d.out));
    if (out->num_elements() == 0) return Status::OK();
    const int64_t heads = attrs_.heads;
    if (d.keys == 0) {  // no keys: each softmax row is empty, and so is every sum of values
      std::memset(out->raw_data(), 0, out->num_bytes());
      return Status::OK();
    }
    const Shape scores_shape{d.batch, heads, d.seq, d.keys};
    TempBuffers temp(ctx.allocator());
    ASSIGN_OR_RETURN(void* scores_data, temp.Get(sizeof(float) * scores_shape.num_elements()));
    float* scores = static_cast<float*>(scores_data);
    std::shared_ptr<const Prims> p = Primitives(d);
    dnnl::stream& stream = ThreadStream();
    auto run = [&](const Product& prod, const float* a, const float* b, float* y) -> Status {
      ASSIGN_OR_RETURN(void* scratch, temp.Get(prod.scratch.get_size()));
      prod.prim.execute(stream, {{DNNL_ARG_SRC, Memory(prod.a, a)},
                                 {DNNL_ARG_WEIGHTS, Memory(prod.b, b)},
                                 {DNNL_ARG_DST, Memory(prod.y, y)},
                                 {DNNL_ARG_SCRATCHPAD, Memory(prod.scratch, scratch)}});
      stream.wait();
      return Status::OK();
    };
    if (attrs_.head_dim > 0) {
      RETURN_IF_ERROR(
          run(p->scores, q.data<float>() + attrs_.q_col, k.data<float>() + attrs_.k_col, scores));
    } else {
      std::memset(scores, 0, sizeof(float) * scores_shape.num_elements());
    }
    MaskedSoftmaxRows(mask.data<float>(), d.mask_dims, scores_shape, scores);
    return run(p->values, scores, v.data<float>() + attrs_.v_col, out->data<float>());
  }

 private:
  // One matmul primitive and the descriptors it executes with.
  struct Product {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, y, scratch;
  };
  struct Prims {
    Product scores, values;
  };

  static dnnl::memory Memory(const dnnl::memory::desc& desc, const void* data) {
    return dnnl::memory(desc, CpuEngine(), const_cast<void*>(data));
  }

  static dnnl::memory::desc Desc(const dnnl::memory::dims& dims,
                                 const dnnl::memory::dims& strides) {
    return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
  }

  static Product Make(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                      const dnnl::memory::desc& y, float scale) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, y), attr, CpuEngine());
    // The descriptors as the primitive holds them (oneDNN normalises the strides of dimensions
    // of size 1, and execution wants its own).
    return Product{dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(),
                   pd.scratchpad_desc()};
  }

  std::shared_ptr<const Prims> Primitives(const AttentionDims& d) const {
    const int64_t b = d.batch, h = attrs_.heads, s = d.seq, sk = d.keys;
    const int64_t dq = attrs_.head_dim, dv = attrs_.value_dim;
    std::string key = fmt::format("attention:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}", b, h, s, sk, dq, dv,
                                  d.q_width, d.k_width, d.v_width, alpha_);
    return PrimitiveCache::Global().GetOrCreate<Prims>(key, [&] {
      const dnnl::memory::desc scores = Desc({b, h, s, sk}, {h * s * sk, s * sk, sk, 1});
      Prims p;
      if (dq > 0) {
        // Head j's queries: the dq columns from j * dq of each row of q; its keys read as
        // [dq, Sk], the transpose of theirs.
        p.scores = Make(Desc({b, h, s, dq}, {s * d.q_width, dq, d.q_width, 1}),
                        Desc({b, h, dq, sk}, {sk * d.k_width, dq, 1, d.k_width}), scores, alpha_);
      }
      p.values = Make(scores, Desc({b, h, sk, dv}, {sk * d.v_width, dv, d.v_width, 1}),
                      Desc({b, h, s, dv}, {s * h * dv, dv, h * dv, 1}), 1.f);
      return std::make_shared<const Prims>(std::move(p));
    });
  }

  AttentionAttrs attrs_;
  const float alpha_;
};

}  // namespace

Status RegisterAttentionKernels() { return RegisterKernel<AttentionKernel>("_Attention", "CPU"); }

}  // namespace dflow::cpu
