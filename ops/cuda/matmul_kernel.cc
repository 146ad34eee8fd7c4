// GPU kernels of MatMul, BatchMatMul and _FusedMatMul on cuBLASLt (f32 and f64). dflow's
// matrices are row-major; cuBLASLt's are column-major, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T: B is cuBLASLt's first operand and A its second, and the result,
// column-major [n, m], is C row-major. _FusedMatMul's bias [n] and ReLU are cuBLASLt epilogues
// (the bias runs along D's rows, which are C's columns). Batches are strided.
//
// cuBLASLt is opened on the first product (cublaslt_library.h). One cuBLASLt handle per GPU
// serves every kernel; the algorithm is asked of cuBLASLt's
// heuristic once per (batch, m, n, k) and kept by the kernel; FP32 products are computed in FP32
// (no TF32), as PyTorch's default.
#include "ops/common/matmul_kernel.h"

#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/cublaslt_library.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Status BlasError(cublasStatus_t s, std::string_view what) {
  // cuBLASLt alone has no names for its statuses (libcublas has): the number, as cublas_api.h
  // lists them.
  return Internal("cuBLASLt {} failed: cublasStatus_t {}", what, static_cast<int>(s));
}

#define DFLOW_RETURN_IF_BLAS(call, what)         \
  do {                                           \
    cublasStatus_t blas_status_ = (call);        \
    if (blas_status_ != CUBLAS_STATUS_SUCCESS) { \
      return BlasError(blas_status_, what);      \
    }                                            \
  } while (false)

// The process's cuBLASLt handle for GPU `ordinal`, made on first use.
Result<cublasLtHandle_t> LtHandle(const CublasLt& lt, int ordinal) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t>* handles = new std::map<int, cublasLtHandle_t>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(ordinal);
  if (it != handles->end()) return it->second;
  cublasLtHandle_t h = nullptr;
  DFLOW_RETURN_IF_BLAS(lt.Create(&h), "creating a handle");
  handles->emplace(ordinal, h);
  return h;
}

// Owns cuBLASLt descriptors for one call.
struct Descriptors {
  explicit Descriptors(const CublasLt& l) : lt(l) {}
  const CublasLt& lt;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) lt.MatmulPreferenceDestroy(pref);
    if (d) lt.MatrixLayoutDestroy(d);
    if (b) lt.MatrixLayoutDestroy(b);
    if (a) lt.MatrixLayoutDestroy(a);
    if (op) lt.MatmulDescDestroy(op);
  }
};

// A column-major layout of `rows` x `cols` with leading dimension `ld`, `batch` of them
// `stride` elements apart.
Status Layout(const CublasLt& lt, cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows,
              int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  DFLOW_RETURN_IF_BLAS(lt.MatrixLayoutCreate(out, type, static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), ld),
                       "creating a matrix layout");
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    DFLOW_RETURN_IF_BLAS(
        lt.MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
        "setting the batch count");
    DFLOW_RETURN_IF_BLAS(
        lt.MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                    sizeof stride),
        "setting the batch stride");
  }
  return Status::OK();
}

class MatMulKernel : public common::MatMulBase<MatMulKernel> {
 public:
  using MatMulBase::MatMulBase;

  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const MatMulDims& dims) {
    const DType t = a.dtype();
    const bool half = t == DType::kF16 || t == DType::kBF16;
    if (b.dtype() != t || (t != DType::kF32 && t != DType::kF64 && !half)) {
      return InvalidArgument("no GPU MatMul for {} x {} (f32, f64, f16 or bf16)", t, b.dtype());
    }
    if (epilogue_.bias && t == DType::kF64) {
      return InvalidArgument("no GPU _FusedMatMul for {} (f32, f16 or bf16)", t);
    }
    if (epilogue_.gelu && half) {
      return InvalidArgument("no GPU _FusedMatMul with a Gelu for {} (f32)", t);
    }
    auto* cuda = dynamic_cast<CudaContext*>(ctx.device_context());
    if (cuda == nullptr) return Internal("a GPU kernel ran without the CUDA device's context");
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), dims.out));
    if (out->num_elements() == 0) return Status::OK();
    const int64_t m = dims.m, k = dims.k, n = dims.n, batch = dims.batch;
    const bool f64 = t == DType::kF64;
    if (k == 0) return EmptyProduct(ctx, *out, n, cuda->stream(), t);
    // f16 and bf16 multiply on tensor cores and accumulate in f32, with f32 scalars.
    const cudaDataType_t type = f64                 ? CUDA_R_64F
                                : t == DType::kF16  ? CUDA_R_16F
                                : t == DType::kBF16 ? CUDA_R_16BF
                                                    : CUDA_R_32F;
    const cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F;
    const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;

    ASSIGN_OR_RETURN(const CublasLt* lt, LoadCublasLt());
    Descriptors desc(*lt);
    DFLOW_RETURN_IF_BLAS(lt->MatmulDescCreate(&desc.op, compute, scale), "creating a matmul");
    // cuBLASLt's first operand is B: stored row-major [k, n] (or [n, k] transposed), which is
    // column-major [n, k] (or [k, n]).
    cublasOperation_t op_first = tb_ ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = ta_ ? CUBLAS_OP_T : CUBLAS_OP_N;
    DFLOW_RETURN_IF_BLAS(lt->MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                    sizeof op_first),
                         "setting a transpose");
    DFLOW_RETURN_IF_BLAS(lt->MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &op_second, sizeof op_second),
                         "setting a transpose");
    // cuBLASLt's RELU epilogue is max(x, 0), which turns NaN into 0: for f32 and f64 the ReLU
    // runs after the product as a kernel that keeps NaN, as on the CPU (f16 and bf16, which
    // have no such kernel yet, keep the epilogue).
    const bool relu_after = epilogue_.relu && (t == DType::kF32 || f64);
    if (epilogue_.bias) {
      cublasLtEpilogue_t epilogue =
          epilogue_.relu && !relu_after ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
      const void* bias = ctx.input(2).raw_data();
      DFLOW_RETURN_IF_BLAS(lt->MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                      &epilogue, sizeof epilogue),
                           "setting the epilogue");
      DFLOW_RETURN_IF_BLAS(lt->MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias),
                           "setting the bias");
    }
    RETURN_IF_ERROR(
        Layout(*lt, &desc.a, type, tb_ ? k : n, tb_ ? n : k, tb_ ? k : n, batch, k * n));
    RETURN_IF_ERROR(
        Layout(*lt, &desc.b, type, ta_ ? m : k, ta_ ? k : m, ta_ ? m : k, batch, m * k));
    RETURN_IF_ERROR(Layout(*lt, &desc.d, type, n, m, n, batch, m * n));

    ASSIGN_OR_RETURN(cublasLtHandle_t handle, LtHandle(*lt, cuda->ordinal()));
    ASSIGN_OR_RETURN(Tensor workspace, ctx.AllocateTemp(kWorkspaceBytes));
    ASSIGN_OR_RETURN(cublasLtMatmulAlgo_t algo, Algorithm(handle, desc, t, batch, m, n, k));
    const double one64 = 1, zero64 = 0;
    const float one32 = 1, zero32 = 0;
    const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
    const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
    DFLOW_RETURN_IF_BLAS(
        lt->Matmul(handle, desc.op, alpha, b.raw_data(), desc.a, a.raw_data(), desc.b, beta,
                   out->raw_data(), desc.d, out->raw_data(), desc.d, &algo, workspace.raw_data(),
                   kWorkspaceBytes, reinterpret_cast<cudaStream_t>(cuda->stream())),
        "matmul");
    if (relu_after) {
      return Launched(
          LaunchUnary(UnaryOp::kRelu, f64 ? ElemType::kF64 : ElemType::kF32, out->raw_data(),
                      out->raw_data(), out->num_elements(), 0, cuda->stream()),
          "Relu");
    }
    // GELU (the erf form; cuBLASLt's GELU epilogue is the tanh approximation) after the product.
    if (epilogue_.gelu) {
      return Launched(
          LaunchUnary(UnaryOp::kGelu, f64 ? ElemType::kF64 : ElemType::kF32, out->raw_data(),
                      out->raw_data(), out->num_elements(), 0, cuda->stream()),
          "Gelu");
    }
    return Status::OK();
  }

 private:
  // cuBLASLt's best algorithm for this shape, asked once and kept.
  Result<cublasLtMatmulAlgo_t> Algorithm(cublasLtHandle_t handle, Descriptors& desc, DType t,
                                         int64_t batch, int64_t m, int64_t n, int64_t k) {
    auto key = std::make_tuple(static_cast<int64_t>(t), batch, m, n, k);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = algos_.find(key);
      if (it != algos_.end()) return it->second;
    }
    const CublasLt& lt = desc.lt;
    DFLOW_RETURN_IF_BLAS(lt.MatmulPreferenceCreate(&desc.pref), "creating a preference");
    size_t workspace = kWorkspaceBytes;
    DFLOW_RETURN_IF_BLAS(
        lt.MatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                        &workspace, sizeof workspace),
        "setting the workspace");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    DFLOW_RETURN_IF_BLAS(lt.MatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d,
                                                   desc.pref, 1, &result, &found),
                         "choosing an algorithm");
    if (found == 0) {
      return Internal("cuBLASLt has no algorithm for [{}] {}x{}x{}", batch, m, k, n);
    }
    std::lock_guard<std::mutex> lock(mu_);
    algos_.emplace(key, result.algo);
    return result.algo;
  }

  // A product over k = 0: zeros, then the bias and the activation.
  Status EmptyProduct(KernelContext& ctx, Tensor& out, int64_t n, CudaStream stream, DType t) {
    const int64_t count = out.num_elements();
    if (t == DType::kF16 || t == DType::kBF16) {  // zeros; a bias needs f32 or f64 kernels
      if (epilogue_.bias) return InvalidArgument("no GPU _FusedMatMul over k = 0 for {}", t);
      if (cudaMemsetAsync(out.raw_data(), 0, out.num_bytes(),
                          reinterpret_cast<cudaStream_t>(stream)) != cudaSuccess) {
        return Internal("clearing {} bytes failed", out.num_bytes());
      }
      return Status::OK();
    }
    const ElemType type = t == DType::kF64 ? ElemType::kF64 : ElemType::kF32;
    RETURN_IF_ERROR(Launched(LaunchFill(type, out.raw_data(), count, 0.0, stream), "a fill"));
    if (!epilogue_.bias) return Status::OK();
    RETURN_IF_ERROR(Launched(LaunchBiasAdd(type, out.raw_data(), ctx.input(2).raw_data(),
                                           out.raw_data(), count, n, stream),
                             "BiasAdd"));
    if (!epilogue_.relu && !epilogue_.gelu) return Status::OK();
    return Launched(LaunchUnary(epilogue_.relu ? UnaryOp::kRelu : UnaryOp::kGelu, type,
                                out.raw_data(), out.raw_data(), count, 0, stream),
                    epilogue_.relu ? "Relu" : "Gelu");
  }

  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace

Status RegisterMatMulKernels() {
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("MatMul", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("BatchMatMul", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<MatMulKernel>("_FusedMatMul", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
