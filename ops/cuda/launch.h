// The CUDA side of the GPU kernels: launches on a stream, with plain arguments, so that the
// .cu files need none of dflow's headers (nvcc compiles only these) and the OpKernel classes
// (elementwise_kernels.cc) are plain C++. Each returns the cudaError_t of the launch as an int.
#pragma once

#include <cstdint>

#include "ops/cuda/cuda_stream.h"

namespace dflow::cuda {

enum class ElemType { kF32, kF64, kI32, kI64 };
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };

inline constexpr int kMaxRank = 8;

// How an output index maps to the inputs' offsets under broadcasting: row-major output
// dimensions and each input's element strides (0 on broadcast dimensions).
struct BroadcastIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

// out[i] = op(a[..], b[..]) for i < n; `index` null when a, b and out have the same shape.
int LaunchBinary(BinaryOp op, ElemType type, const void* a, const void* b, void* out, int64_t n,
                 const BroadcastIndex* index, CudaStream stream);
// y = op(x) on n elements of f32, f64, i32 or i64 (integers through double, as the CPU's std::
// functions); `alpha` is LeakyRelu's slope. NaN stays NaN through Relu and LeakyRelu.
enum class UnaryOp {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kSquare,
  kRelu,
  kLeakyRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kAbs,
  kSign,
  kFloor,
  kCeil,
  kRound,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kErf,
};
int LaunchUnary(UnaryOp op, ElemType type, const void* x, void* y, int64_t n, double alpha,
                CudaStream stream);
// An activation's gradient from g and the activation's input x (same shapes).
enum class GradOp { kRelu, kLeakyRelu, kGelu };
int LaunchActivationGrad(GradOp op, ElemType type, const void* g, const void* x, void* out,
                         int64_t n, double alpha, CudaStream stream);
// out[i] = a[..] op b[..] as bool; `index` null when a, b and out have the same shape.
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };
int LaunchCompare(CompareOp op, ElemType type, const void* a, const void* b, bool* out, int64_t n,
                  const BroadcastIndex* index, CudaStream stream);
// Select's three broadcast inputs: the condition's strides and the two values'.
struct SelectIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t c_strides[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};
// out[i] = c[..] ? a[..] : b[..] for elements of `elem_bytes` bytes (1, 2, 4 or 8); `index` null
// when all have the output's shape.
int LaunchSelect(int elem_bytes, const bool* c, const void* a, const void* b, void* out, int64_t n,
                 const SelectIndex* index, CudaStream stream);
// *count (device memory) = how many of b's n elements are zero: integer Div's check.
int LaunchCountZeros(ElemType type, const void* b, int64_t n, unsigned int* count,
                     CudaStream stream);
// out[i] = value for n one-byte elements (bool, u8).
int LaunchFillBytes(void* out, int64_t n, unsigned char value, CudaStream stream);
// out[i] = value for i < n.
int LaunchFill(ElemType type, void* out, int64_t n, double value, CudaStream stream);

// Cast's element types (ops/cuda/cast.cu).
enum class CastType { kF32, kF64, kF16, kBF16, kI32, kI64, kU8, kBool };
// out[i] = in[i] converted from `from` to `to` (through f32 for f16 and bf16, rounded to
// nearest even; to bool: not zero).
int LaunchCast(CastType from, CastType to, const void* in, void* out, int64_t n, CudaStream stream);
// out[r, j] = x[r, j] + bias[j]: x seen as [n / c, c].
int LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* out, int64_t n, int64_t c,
                  CudaStream stream);

// A reduction's index map: the input's dimensions split into those kept (the output's, in
// order) and those folded, each with its element stride in the input.
struct ReduceIndex {
  int kept_rank = 0;
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};
  int folded_rank = 0;
  int64_t folded_dims[kMaxRank] = {};
  int64_t folded_strides[kMaxRank] = {};
  int64_t out_elements = 1;
  int64_t count = 1;  // input elements per output element
};
enum class ReduceMode { kSum, kMean, kMax };
// out[o] = the sum (or mean) of the input elements folded into o; floats accumulate in double,
// integers in int64; the mean of nothing is NaN for floats and 0 for integers; the maximum
// (kMax) has NaN win and must not be of nothing.
int LaunchReduce(ReduceMode mode, ElemType type, const void* in, void* out,
                 const ReduceIndex& index, CudaStream stream);
// The reduction's gradient: out[i] = g[o(i)] * scale for each of the input's n elements, where
// o(i) is the output element input element i folds into (`out_strides`: the output's element
// stride for each input dimension, 0 on folded ones).
struct SpreadIndex {
  int rank = 0;
  int64_t in_dims[kMaxRank] = {};
  int64_t out_strides[kMaxRank] = {};
};
int LaunchSpread(ElemType type, const void* g, void* out, int64_t n, const SpreadIndex& index,
                 double scale, CudaStream stream);

// Softmax cross-entropy of logits [rows, classes] against integer labels (i32 when
// `labels_i64` is false): loss[r] = -log softmax(logits[r])[label], backprop[r] =
// softmax(logits[r]) - onehot(label). A label outside [0, classes) makes the row's loss and
// backprop NaN (the host would have to wait to see it). f32 or f64 logits.
int LaunchSparseSoftmaxXent(ElemType type, const void* logits, const void* labels, bool labels_i64,
                            void* loss, void* backprop, int64_t rows, int64_t classes,
                            CudaStream stream);

// One Adam step on n elements (f32 or f64), every scalar read on the device: the step counter
// (i64) is incremented from `step_in` into `step_out`, the learning rate read from `lr`, and
// w, m, v written to w_out, m_out, v_out (which may be w, m, v). weight_decay 0: Adam; else
// AdamW's decoupled decay (w -= lr * weight_decay * w).
struct AdamArgs {
  const void* grad;
  const void* w;
  const void* m;
  const void* v;
  void* w_out;
  void* m_out;
  void* v_out;
  const void* lr;
  const int64_t* step_in;
  int64_t* step_out;
  double* scratch;  // two doubles of device memory for the step's factors
  double beta1, beta2, epsilon, weight_decay;
  const bool* apply = nullptr;  // a gated update's gate, on the device (below)
};
int LaunchAdam(ElemType type, const AdamArgs& args, int64_t n, CudaStream stream);

// One SGD step (accum null: w -= lr * g) or momentum step (accum = momentum * accum + g;
// w -= lr * accum, or with Nesterov w -= lr * (g + momentum * accum)) on n elements (f32 or
// f64), the learning rate read on the device. Outputs may be the inputs.
//
// Both updates, given `apply` (device memory), read it on the device: where it is false every
// value stays as it was (copied to the outputs, and Adam's step counter not incremented), so a
// skipped step costs one pass and no wait of the host.
struct MomentumArgs {
  const void* grad;
  const void* w;
  const void* accum;  // null for SGD
  void* w_out;
  void* accum_out;
  const void* lr;
  double momentum;
  bool nesterov;
  const bool* apply = nullptr;  // a gated update's gate, on the device (below)
};
int LaunchMomentum(ElemType type, const MomentumArgs& args, int64_t n, CudaStream stream);

// AllFinite's check of one input (dynamic loss scaling's, rewrite/mixed_precision.h): `type`
// kF32, kF64, kF16 or kBF16 read as raw bits; sets *finite (device memory, which the caller
// set true before the first input) to false where any of the n elements is NaN or infinite.
int LaunchClearIfNotFinite(CastType type, const void* x, int64_t n, bool* finite,
                           CudaStream stream);

// inv[i] = 1 / sqrt(var[i] + eps) for i < c (f32 or f64; computed in double).
int LaunchInvStd(ElemType type, const void* var, void* inv, int64_t c, double eps,
                 CudaStream stream);

// Pooling over the planes (image channels) of NCHW tensors with the CPU's semantics: windows
// clipped to the input, the first maximum wins, averages over the elements inside.
struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, pt, pl;
};
enum class PoolKind { kMax, kAvg, kMaxGrad, kAvgGrad };
// Forward: out [planes, oh, ow] from x (dy unused). Gradients: out [planes, h, w] from x and
// dy [planes, oh, ow].
int LaunchPool(PoolKind kind, ElemType type, const void* x, const void* dy, void* out,
               const PoolGeometry& g, CudaStream stream);

// dst[p, y, x] = src[p, y + off_y, x + off_x] where that is inside src, else 0 (f32 or f64):
// zero padding with negative offsets, cropping with positive ones.
int LaunchWindow2d(ElemType type, const void* src, int64_t src_h, int64_t src_w, void* dst,
                   int64_t dst_h, int64_t dst_w, int64_t planes, int64_t off_y, int64_t off_x,
                   CudaStream stream);

// The name and text of a CUDA error code.
const char* ErrorName(int error);
const char* ErrorString(int error);

}  // namespace dflow::cuda
