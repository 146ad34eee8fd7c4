// CPU MatMul on oneDNN's matmul primitive. Transposes are expressed as strides, so no data is
// moved before the multiply. The primitive for the last shape seen is kept; oneDNN's own
// primitive cache covers shapes that alternate. Scratchpads are user-managed (one buffer per
// thread): oneDNN's default library scratchpad is shared and unsafe for concurrent runs.
#include <cstring>
#include <mutex>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dnnl_context.h"

namespace dflow::cpu {
namespace {

class MatMulKernel : public OpKernel {
 public:
  explicit MatMulKernel(const KernelInit& init)
      : ta_(std::get<bool>(*init.node.FindAttr("transpose_a"))),
        tb_(std::get<bool>(*init.node.FindAttr("transpose_b"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.shape().rank() != 2 || b.shape().rank() != 2) {
      return InvalidArgument("inputs must be matrices, got {} and {}", a.shape(), b.shape());
    }
    int64_t m = a.shape()[ta_ ? 1 : 0], k = a.shape()[ta_ ? 0 : 1];
    int64_t kb = b.shape()[tb_ ? 1 : 0], n = b.shape()[tb_ ? 0 : 1];
    if (k != kb) {
      return InvalidArgument("inner dimensions differ: {}{} x {}{} ({} vs {})", a.shape(),
                             ta_ ? "^T" : "", b.shape(), tb_ ? "^T" : "", k, kb);
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), Shape{m, n}));
    if (m == 0 || n == 0) return Status::OK();
    if (k == 0) {
      std::memset(out->raw_data(), 0, out->num_bytes());
      return Status::OK();
    }
    if (a.dtype() == DType::kF64) {
      MatMulF64(a.data<double>(), b.data<double>(), out->data<double>(), m, k, n);
      return Status::OK();
    }
    auto [prim, scratch_desc] = Primitive(m, k, n);
    using dt = dnnl::memory::data_type;
    dnnl::memory am(Desc(m, k, ta_), CpuEngine(), a.raw_data());
    dnnl::memory bm(Desc(k, n, tb_), CpuEngine(), b.raw_data());
    dnnl::memory cm(dnnl::memory::desc({m, n}, dt::f32, dnnl::memory::dims{n, 1}), CpuEngine(),
                    out->raw_data());
    dnnl::memory scratch(scratch_desc, CpuEngine(), ThreadScratchpad(scratch_desc.get_size()));
    dnnl::stream& stream = ThreadStream();
    prim.execute(stream, {{DNNL_ARG_SRC, am},
                          {DNNL_ARG_WEIGHTS, bm},
                          {DNNL_ARG_DST, cm},
                          {DNNL_ARG_SCRATCHPAD, scratch}});
    stream.wait();
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

  // A logical [rows, cols] matrix stored row-major, or transposed (stored as [cols, rows]).
  static dnnl::memory::desc Desc(int64_t rows, int64_t cols, bool transposed) {
    dnnl::memory::dims strides =
        transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1};
    return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::f32, strides);
  }

  std::pair<dnnl::matmul, dnnl::memory::desc> Primitive(int64_t m, int64_t k, int64_t n) {
    std::lock_guard lock(mu_);
    if (!cached_ || m != m_ || k != k_ || n != n_) {
      dnnl::matmul::desc desc(
          Desc(m, k, ta_), Desc(k, n, tb_),
          dnnl::memory::desc({m, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, 1}));
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
      prim_ = dnnl::matmul(pd);
      scratch_desc_ = pd.scratchpad_desc();
      m_ = m;
      k_ = k;
      n_ = n;
      cached_ = true;
    }
    return {prim_, scratch_desc_};
  }

  const bool ta_, tb_;
  std::mutex mu_;
  bool cached_ = false;  // GUARDED_BY(mu_), as are the members below
  int64_t m_ = 0, k_ = 0, n_ = 0;
  dnnl::matmul prim_;
  dnnl::memory::desc scratch_desc_;
};

}  // namespace

Status RegisterMatMulKernels() { return RegisterKernel<MatMulKernel>("MatMul", "CPU"); }

}  // namespace dflow::cpu
