// Element-wise GPU kernels beyond the arithmetic of elementwise.cu: the unary math ops and the
// activation gradients, comparisons (bool outputs), Select, the zero-divisor count of integer
// Div and one-byte fills. The unary ops and activation gradients are maps of 16-byte accesses
// (map.cuh); the rest grid-stride loops, one thread per output element; broadcasting by the
// strides of launch.h, with 32-bit index arithmetic where the output allows it.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/dispatch.cuh"
#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/map.cuh"

namespace dflow::cuda {
namespace {

// Integers go through double, as the CPU's std:: functions take them.
template <typename T>
using Real = std::conditional_t<std::is_floating_point_v<T>, T, double>;

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <UnaryOp kOp, typename T>
__device__ __forceinline__ T ApplyUnary(T x, double alpha) {
  using R = Real<T>;
  const R r = static_cast<R>(x);
  if constexpr (kOp == UnaryOp::kNeg) return -x;
  if constexpr (kOp == UnaryOp::kSquare) return x * x;
  if constexpr (kOp == UnaryOp::kRelu) return (x > T(0) || x != x) ? x : T(0);  // NaN kept
  if constexpr (kOp == UnaryOp::kLeakyRelu) {
    return (x > T(0) || x != x) ? x : static_cast<T>(alpha * static_cast<double>(x));
  }
  if constexpr (kOp == UnaryOp::kExp) return static_cast<T>(exp(r));
  if constexpr (kOp == UnaryOp::kLog) return static_cast<T>(log(r));
  if constexpr (kOp == UnaryOp::kSqrt) return static_cast<T>(sqrt(r));
  if constexpr (kOp == UnaryOp::kRsqrt) return static_cast<T>(R(1) / sqrt(r));
  if constexpr (kOp == UnaryOp::kSigmoid) return static_cast<T>(R(1) / (R(1) + exp(-r)));
  if constexpr (kOp == UnaryOp::kTanh) return static_cast<T>(tanh(r));
  if constexpr (kOp == UnaryOp::kGelu) {
    return static_cast<T>(R(0.5) * r * (R(1) + erf(r * static_cast<R>(kSqrtHalf))));
  }
  if constexpr (kOp == UnaryOp::kAbs) return x < T(0) ? T(-x) : x;
  if constexpr (kOp == UnaryOp::kSign) return x != x ? x : static_cast<T>((T(0) < x) - (x < T(0)));
  if constexpr (kOp == UnaryOp::kFloor) return static_cast<T>(floor(r));
  if constexpr (kOp == UnaryOp::kCeil) return static_cast<T>(ceil(r));
  if constexpr (kOp == UnaryOp::kRound) return static_cast<T>(rint(r));
  if constexpr (kOp == UnaryOp::kSin) return static_cast<T>(sin(r));
  if constexpr (kOp == UnaryOp::kCos) return static_cast<T>(cos(r));
  if constexpr (kOp == UnaryOp::kTan) return static_cast<T>(tan(r));
  if constexpr (kOp == UnaryOp::kAsin) return static_cast<T>(asin(r));
  if constexpr (kOp == UnaryOp::kAcos) return static_cast<T>(acos(r));
  if constexpr (kOp == UnaryOp::kAtan) return static_cast<T>(atan(r));
  if constexpr (kOp == UnaryOp::kSinh) return static_cast<T>(sinh(r));
  if constexpr (kOp == UnaryOp::kCosh) return static_cast<T>(cosh(r));
  if constexpr (kOp == UnaryOp::kAsinh) return static_cast<T>(asinh(r));
  if constexpr (kOp == UnaryOp::kAcosh) return static_cast<T>(acosh(r));
  if constexpr (kOp == UnaryOp::kAtanh) return static_cast<T>(atanh(r));
  if constexpr (kOp == UnaryOp::kErf) return static_cast<T>(erf(r));
  return x;  // not reached: every op returns above
}

template <UnaryOp kOp>
struct UnaryFn {
  double alpha;
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return ApplyUnary<kOp>(x, alpha);
  }
};

template <UnaryOp kOp>
int LaunchUnaryOp(ElemType type, const void* x, void* y, int64_t n, double alpha, cudaStream_t s) {
  return Dispatch(type, [&]<typename T>() {
    return LaunchMap(UnaryFn<kOp>{alpha}, static_cast<T*>(y), n, s, static_cast<const T*>(x));
  });
}

template <GradOp kOp>
struct GradFn {
  double alpha;
  template <typename T>
  __device__ __forceinline__ T operator()(T g, T x) const {
    if constexpr (kOp == GradOp::kRelu) {
      return x > T(0) ? g : T(0);
    } else if constexpr (kOp == GradOp::kLeakyRelu) {
      return x > T(0) ? g : static_cast<T>(alpha * static_cast<double>(g));
    } else {  // Gelu: g * (cdf(x) + x * pdf(x)), in double as on the CPU
      const double v = static_cast<double>(x);
      const double cdf = 0.5 * (1 + erf(v * kSqrtHalf));
      const double pdf = kInvSqrt2Pi * exp(-0.5 * v * v);
      return static_cast<T>(static_cast<double>(g) * (cdf + v * pdf));
    }
  }
};

template <GradOp kOp>
int LaunchGradOp(ElemType type, const void* g, const void* x, void* out, int64_t n, double alpha,
                 cudaStream_t s) {
  return Dispatch(type, [&]<typename T>() {
    return LaunchMap(GradFn<kOp>{alpha}, static_cast<T*>(out), n, s, static_cast<const T*>(g),
                     static_cast<const T*>(x));
  });
}

template <CompareOp kOp, typename T>
__device__ __forceinline__ bool Compare(T a, T b) {
  if constexpr (kOp == CompareOp::kEq) return a == b;
  if constexpr (kOp == CompareOp::kNe) return a != b;
  if constexpr (kOp == CompareOp::kLt) return a < b;
  if constexpr (kOp == CompareOp::kLe) return a <= b;
  if constexpr (kOp == CompareOp::kGt) return a > b;
  if constexpr (kOp == CompareOp::kGe) return a >= b;
  return false;  // not reached
}

// The offsets of output element i in up to three broadcast inputs, in index type I.
template <typename I, int kInputs>
__device__ __forceinline__ void Offsets(I i, int rank, const int64_t* dims,
                                        const int64_t* const* strides, I* offsets) {
  for (int k = 0; k < kInputs; ++k) offsets[k] = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const I dim = static_cast<I>(dims[d]);
    const I coord = i % dim;
    i /= dim;
    for (int k = 0; k < kInputs; ++k) offsets[k] += coord * static_cast<I>(strides[k][d]);
  }
}

template <CompareOp kOp, typename T, typename I>
__global__ void CompareKernel(const T* a, const T* b, bool* out, int64_t n, BroadcastIndex index,
                              bool broadcast) {
  DFLOW_GRID_LOOP(i, n) {
    if (!broadcast) {
      out[i] = Compare<kOp>(a[i], b[i]);
      continue;
    }
    const int64_t* strides[2] = {index.a_strides, index.b_strides};
    I o[2];
    Offsets<I, 2>(static_cast<I>(i), index.rank, index.out_dims, strides, o);
    out[i] = Compare<kOp>(a[o[0]], b[o[1]]);
  }
}

template <CompareOp kOp>
int LaunchCompareOp(ElemType type, const void* a, const void* b, bool* out, int64_t n,
                    const BroadcastIndex* index, cudaStream_t s) {
  const BroadcastIndex none;
  const BroadcastIndex& idx = index ? *index : none;
  const bool small = n <= INT32_MAX;
  return Dispatch(type, [&]<typename T>() {
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    if (small) {
      CompareKernel<kOp, T, uint32_t>
          <<<Blocks(n), kThreads, 0, s>>>(pa, pb, out, n, idx, index != nullptr);
    } else {
      CompareKernel<kOp, T, int64_t>
          <<<Blocks(n), kThreads, 0, s>>>(pa, pb, out, n, idx, index != nullptr);
    }
    return LastError();
  });
}

// Select on elements of kBytes bytes (the dtype does not matter, only its size).
template <int kBytes>
struct Word;
template <>
struct Word<1> {
  using type = uint8_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint64_t;
};

template <typename W, typename I>
__global__ void SelectKernel(const bool* c, const W* a, const W* b, W* out, int64_t n,
                             SelectIndex index, bool broadcast) {
  DFLOW_GRID_LOOP(i, n) {
    if (!broadcast) {
      out[i] = c[i] ? a[i] : b[i];
      continue;
    }
    const int64_t* strides[3] = {index.c_strides, index.a_strides, index.b_strides};
    I o[3];
    Offsets<I, 3>(static_cast<I>(i), index.rank, index.out_dims, strides, o);
    out[i] = c[o[0]] ? a[o[1]] : b[o[2]];
  }
}

template <int kBytes>
int LaunchSelectWords(const bool* c, const void* a, const void* b, void* out, int64_t n,
                      const SelectIndex* index, cudaStream_t s) {
  using W = typename Word<kBytes>::type;
  const SelectIndex none;
  const SelectIndex& idx = index ? *index : none;
  const W* pa = static_cast<const W*>(a);
  const W* pb = static_cast<const W*>(b);
  W* po = static_cast<W*>(out);
  if (n <= INT32_MAX) {
    SelectKernel<W, uint32_t>
        <<<Blocks(n), kThreads, 0, s>>>(c, pa, pb, po, n, idx, index != nullptr);
  } else {
    SelectKernel<W, int64_t>
        <<<Blocks(n), kThreads, 0, s>>>(c, pa, pb, po, n, idx, index != nullptr);
  }
  return LastError();
}

template <typename T>
__global__ void CountZeros(const T* b, int64_t n, unsigned int* count) {
  DFLOW_GRID_LOOP(i, n) {
    if (b[i] == T(0)) atomicAdd(count, 1u);
  }
}

}  // namespace

int LaunchUnary(UnaryOp op, ElemType type, const void* x, void* y, int64_t n, double alpha,
                CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (op) {
    case UnaryOp::kNeg:
      return LaunchUnaryOp<UnaryOp::kNeg>(type, x, y, n, alpha, s);
    case UnaryOp::kExp:
      return LaunchUnaryOp<UnaryOp::kExp>(type, x, y, n, alpha, s);
    case UnaryOp::kLog:
      return LaunchUnaryOp<UnaryOp::kLog>(type, x, y, n, alpha, s);
    case UnaryOp::kSqrt:
      return LaunchUnaryOp<UnaryOp::kSqrt>(type, x, y, n, alpha, s);
    case UnaryOp::kRsqrt:
      return LaunchUnaryOp<UnaryOp::kRsqrt>(type, x, y, n, alpha, s);
    case UnaryOp::kSquare:
      return LaunchUnaryOp<UnaryOp::kSquare>(type, x, y, n, alpha, s);
    case UnaryOp::kRelu:
      return LaunchUnaryOp<UnaryOp::kRelu>(type, x, y, n, alpha, s);
    case UnaryOp::kLeakyRelu:
      return LaunchUnaryOp<UnaryOp::kLeakyRelu>(type, x, y, n, alpha, s);
    case UnaryOp::kSigmoid:
      return LaunchUnaryOp<UnaryOp::kSigmoid>(type, x, y, n, alpha, s);
    case UnaryOp::kTanh:
      return LaunchUnaryOp<UnaryOp::kTanh>(type, x, y, n, alpha, s);
    case UnaryOp::kGelu:
      return LaunchUnaryOp<UnaryOp::kGelu>(type, x, y, n, alpha, s);
    case UnaryOp::kAbs:
      return LaunchUnaryOp<UnaryOp::kAbs>(type, x, y, n, alpha, s);
    case UnaryOp::kSign:
      return LaunchUnaryOp<UnaryOp::kSign>(type, x, y, n, alpha, s);
    case UnaryOp::kFloor:
      return LaunchUnaryOp<UnaryOp::kFloor>(type, x, y, n, alpha, s);
    case UnaryOp::kCeil:
      return LaunchUnaryOp<UnaryOp::kCeil>(type, x, y, n, alpha, s);
    case UnaryOp::kRound:
      return LaunchUnaryOp<UnaryOp::kRound>(type, x, y, n, alpha, s);
    case UnaryOp::kSin:
      return LaunchUnaryOp<UnaryOp::kSin>(type, x, y, n, alpha, s);
    case UnaryOp::kCos:
      return LaunchUnaryOp<UnaryOp::kCos>(type, x, y, n, alpha, s);
    case UnaryOp::kTan:
      return LaunchUnaryOp<UnaryOp::kTan>(type, x, y, n, alpha, s);
    case UnaryOp::kAsin:
      return LaunchUnaryOp<UnaryOp::kAsin>(type, x, y, n, alpha, s);
    case UnaryOp::kAcos:
      return LaunchUnaryOp<UnaryOp::kAcos>(type, x, y, n, alpha, s);
    case UnaryOp::kAtan:
      return LaunchUnaryOp<UnaryOp::kAtan>(type, x, y, n, alpha, s);
    case UnaryOp::kSinh:
      return LaunchUnaryOp<UnaryOp::kSinh>(type, x, y, n, alpha, s);
    case UnaryOp::kCosh:
      return LaunchUnaryOp<UnaryOp::kCosh>(type, x, y, n, alpha, s);
    case UnaryOp::kAsinh:
      return LaunchUnaryOp<UnaryOp::kAsinh>(type, x, y, n, alpha, s);
    case UnaryOp::kAcosh:
      return LaunchUnaryOp<UnaryOp::kAcosh>(type, x, y, n, alpha, s);
    case UnaryOp::kAtanh:
      return LaunchUnaryOp<UnaryOp::kAtanh>(type, x, y, n, alpha, s);
    case UnaryOp::kErf:
      return LaunchUnaryOp<UnaryOp::kErf>(type, x, y, n, alpha, s);
  }
  return Invalid();
}

int LaunchActivationGrad(GradOp op, ElemType type, const void* g, const void* x, void* out,
                         int64_t n, double alpha, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (op) {
    case GradOp::kRelu:
      return LaunchGradOp<GradOp::kRelu>(type, g, x, out, n, alpha, s);
    case GradOp::kLeakyRelu:
      return LaunchGradOp<GradOp::kLeakyRelu>(type, g, x, out, n, alpha, s);
    case GradOp::kGelu:
      return LaunchGradOp<GradOp::kGelu>(type, g, x, out, n, alpha, s);
  }
  return Invalid();
}

int LaunchCompare(CompareOp op, ElemType type, const void* a, const void* b, bool* out, int64_t n,
                  const BroadcastIndex* index, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (op) {
    case CompareOp::kEq:
      return LaunchCompareOp<CompareOp::kEq>(type, a, b, out, n, index, s);
    case CompareOp::kNe:
      return LaunchCompareOp<CompareOp::kNe>(type, a, b, out, n, index, s);
    case CompareOp::kLt:
      return LaunchCompareOp<CompareOp::kLt>(type, a, b, out, n, index, s);
    case CompareOp::kLe:
      return LaunchCompareOp<CompareOp::kLe>(type, a, b, out, n, index, s);
    case CompareOp::kGt:
      return LaunchCompareOp<CompareOp::kGt>(type, a, b, out, n, index, s);
    case CompareOp::kGe:
      return LaunchCompareOp<CompareOp::kGe>(type, a, b, out, n, index, s);
  }
  return Invalid();
}

int LaunchSelect(int elem_bytes, const bool* c, const void* a, const void* b, void* out, int64_t n,
                 const SelectIndex* index, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (elem_bytes) {
    case 1:
      return LaunchSelectWords<1>(c, a, b, out, n, index, s);
    case 2:
      return LaunchSelectWords<2>(c, a, b, out, n, index, s);
    case 4:
      return LaunchSelectWords<4>(c, a, b, out, n, index, s);
    case 8:
      return LaunchSelectWords<8>(c, a, b, out, n, index, s);
  }
  return Invalid();
}

int LaunchCountZeros(ElemType type, const void* b, int64_t n, unsigned int* count,
                     CudaStream stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemsetAsync(count, 0, sizeof(unsigned int), s);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (n == 0) return 0;
  return Dispatch(type, [&]<typename T>() {
    CountZeros<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(b), n, count);
    return LastError();
  });
}

int LaunchFillBytes(void* out, int64_t n, unsigned char value, CudaStream stream) {
  if (n == 0) return 0;
  return static_cast<int>(
      cudaMemsetAsync(out, value, static_cast<size_t>(n), reinterpret_cast<cudaStream_t>(stream)));
}

}  // namespace dflow::cuda
