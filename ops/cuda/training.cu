// GPU kernels for training: fills, bias addition, reductions and their gradient, softmax
// cross-entropy, the Adam, SGD and momentum updates, AllFinite's check and batch norm's inverse
// standard deviation (ops/cuda/launch.h). One thread per output element in grid-stride loops,
// but for reductions over long folds (a block per output element); rows of a softmax are short
// (classes), so one thread takes a row.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/dispatch.cuh"
#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"

namespace dflow::cuda {
namespace {

template <typename T>
__global__ void Fill(T* out, int64_t n, T value) {
  DFLOW_GRID_LOOP(i, n) { out[i] = value; }
}

template <typename T>
__global__ void BiasAdd(const T* x, const T* bias, T* out, int64_t n, int64_t c) {
  DFLOW_GRID_LOOP(i, n) { out[i] = x[i] + bias[i % c]; }
}

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// The input offset of the first element folded into output o.
__device__ __forceinline__ int64_t KeptOffset(const ReduceIndex& index, int64_t o) {
  int64_t base = 0;
  for (int d = index.kept_rank - 1; d >= 0; --d) {
    base += (o % index.kept_dims[d]) * index.kept_strides[d];
    o /= index.kept_dims[d];
  }
  return base;
}

// The offset, from an output's first element, of its k-th folded element.
__device__ __forceinline__ int64_t FoldedOffset(const ReduceIndex& index, int64_t k) {
  int64_t offset = 0;
  for (int d = index.folded_rank - 1; d >= 0; --d) {
    offset += (k % index.folded_dims[d]) * index.folded_strides[d];
    k /= index.folded_dims[d];
  }
  return offset;
}

// What a reduction accumulates: sums in double (floats) or int64 (integers); maxima in T.
template <typename T, bool kMax>
using AccOf = std::conditional_t<kMax, T, Acc<T>>;

template <typename T, bool kMax>
__device__ __forceinline__ AccOf<T, kMax> Start() {
  if constexpr (!kMax) {
    return 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return -INFINITY;  // the maximum of infinities below zero is -inf
  } else if constexpr (sizeof(T) == 4) {
    return INT32_MIN;
  } else {
    return INT64_MIN;
  }
}

// The sum, or the maximum with NaN winning (as the CPU's NanMax).
template <typename T, bool kMax>
__device__ __forceinline__ AccOf<T, kMax> Combine(AccOf<T, kMax> a, AccOf<T, kMax> b) {
  if constexpr (!kMax) {
    return a + b;
  } else {
    return (b != b || b > a) ? b : a;
  }
}

template <typename T, bool kMax>
__device__ __forceinline__ void StoreReduced(T* out, int64_t o, AccOf<T, kMax> acc,
                                             const ReduceIndex& index, bool mean) {
  if (kMax || !mean) {
    out[o] = static_cast<T>(acc);
  } else if (index.count > 0) {
    out[o] = static_cast<T>(acc / static_cast<Acc<T>>(index.count));
  } else if constexpr (std::is_floating_point_v<T>) {
    out[o] = static_cast<T>(NAN);
  } else {
    out[o] = T(0);
  }
}

// Short folds (fewer than kBlockFold elements per output): one thread per output element.
template <typename T, bool kMax>
__global__ void ReduceByThread(const T* in, T* out, ReduceIndex index, bool mean) {
  DFLOW_GRID_LOOP(o, index.out_elements) {
    const int64_t base = KeptOffset(index, o);
    AccOf<T, kMax> acc = Start<T, kMax>();
    for (int64_t k = 0; k < index.count; ++k) {
      acc = Combine<T, kMax>(acc, in[base + FoldedOffset(index, k)]);
    }
    StoreReduced<T, kMax>(out, o, acc, index, mean);
  }
}

constexpr int64_t kBlockFold = 64;

// Long folds (a bias gradient folds batch x height x width into each channel): one block per
// output element, its threads striding over the fold, then a tree in shared memory. The order
// of the additions is fixed by the launch geometry, so runs repeat bit for bit.
template <typename T, bool kMax>
__global__ void ReduceByBlock(const T* in, T* out, ReduceIndex index, bool mean) {
  __shared__ AccOf<T, kMax> partial[kThreads];
  for (int64_t o = blockIdx.x; o < index.out_elements; o += gridDim.x) {
    const int64_t base = KeptOffset(index, o);
    AccOf<T, kMax> acc = Start<T, kMax>();
    for (int64_t k = threadIdx.x; k < index.count; k += blockDim.x) {
      acc = Combine<T, kMax>(acc, in[base + FoldedOffset(index, k)]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        partial[threadIdx.x] = Combine<T, kMax>(partial[threadIdx.x], partial[threadIdx.x + half]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) StoreReduced<T, kMax>(out, o, partial[0], index, mean);
    __syncthreads();  // partial[0] is read before the next output's sums overwrite it
  }
}

template <typename T>
__global__ void Spread(const T* g, T* out, int64_t n, SpreadIndex index, double scale) {
  DFLOW_GRID_LOOP(i, n) {
    int64_t o = 0, rest = i;
    for (int d = index.rank - 1; d >= 0; --d) {
      o += (rest % index.in_dims[d]) * index.out_strides[d];
      rest /= index.in_dims[d];
    }
    out[i] = scale == 1.0 ? g[o] : static_cast<T>(g[o] * scale);
  }
}

template <typename T, typename L>
__global__ void SoftmaxXent(const T* logits, const L* labels, T* loss, T* back, int64_t rows,
                            int64_t classes) {
  DFLOW_GRID_LOOP(r, rows) {
    const T* x = logits + r * classes;
    T* b = back + r * classes;
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label < 0 || label >= classes) {
      loss[r] = static_cast<T>(NAN);
      for (int64_t j = 0; j < classes; ++j) b[j] = static_cast<T>(NAN);
      continue;
    }
    T top = x[0];
    for (int64_t j = 1; j < classes; ++j) top = x[j] > top ? x[j] : top;
    T sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += exp(x[j] - top);
    const T log_sum = log(sum);
    loss[r] = log_sum - (x[label] - top);
    for (int64_t j = 0; j < classes; ++j) b[j] = exp(x[j] - top - log_sum);
    b[label] -= T(1);
  }
}

__device__ inline bool Applies(const bool* apply) { return apply == nullptr || *apply; }

template <typename T>
__global__ void AdamFactors(AdamArgs a) {
  if (!Applies(a.apply)) {  // a skipped step: the counter stays
    a.step_out[0] = a.step_in[0];
    return;
  }
  const int64_t t = a.step_in[0] + 1;
  a.step_out[0] = t;
  const double rate = static_cast<double>(static_cast<const T*>(a.lr)[0]);
  const double correction = sqrt(1 - pow(a.beta2, double(t))) / (1 - pow(a.beta1, double(t)));
  a.scratch[0] = rate * correction;      // step size
  a.scratch[1] = rate * a.weight_decay;  // decoupled decay
}

template <typename T>
__global__ void Adam(AdamArgs a, int64_t n) {
  const T step_size = static_cast<T>(a.scratch[0]), decay = static_cast<T>(a.scratch[1]);
  const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
  const T eps = static_cast<T>(a.epsilon);
  const T* g = static_cast<const T*>(a.grad);
  const T* w = static_cast<const T*>(a.w);
  const T* m = static_cast<const T*>(a.m);
  const T* v = static_cast<const T*>(a.v);
  T* w_out = static_cast<T*>(a.w_out);
  T* m_out = static_cast<T*>(a.m_out);
  T* v_out = static_cast<T*>(a.v_out);
  if (!Applies(a.apply)) {
    DFLOW_GRID_LOOP(i, n) {
      w_out[i] = w[i];
      m_out[i] = m[i];
      v_out[i] = v[i];
    }
    return;
  }
  DFLOW_GRID_LOOP(i, n) {
    const T mi = b1 * m[i] + (1 - b1) * g[i];
    const T vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    w_out[i] = w[i] - decay * w[i] - step_size * mi / (sqrt(vi) + eps);
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

template <typename T>
__global__ void Momentum(MomentumArgs a, int64_t n) {
  const T rate = static_cast<const T*>(a.lr)[0], mu = static_cast<T>(a.momentum);
  const T* g = static_cast<const T*>(a.grad);
  const T* w = static_cast<const T*>(a.w);
  const T* acc = static_cast<const T*>(a.accum);
  T* w_out = static_cast<T*>(a.w_out);
  T* acc_out = static_cast<T*>(a.accum_out);
  if (!Applies(a.apply)) {
    DFLOW_GRID_LOOP(i, n) {
      w_out[i] = w[i];
      if (acc != nullptr) acc_out[i] = acc[i];
    }
    return;
  }
  DFLOW_GRID_LOOP(i, n) {
    if (acc == nullptr) {  // plain SGD
      w_out[i] = w[i] - rate * g[i];
      continue;
    }
    const T next = mu * acc[i] + g[i];
    w_out[i] = w[i] - rate * (a.nesterov ? g[i] + mu * next : next);
    acc_out[i] = next;
  }
}

// *finite = false where an element's exponent bits are all ones (NaN or infinity).
template <typename U>
__global__ void ClearIfNotFinite(const U* x, int64_t n, U exponent, bool* finite) {
  bool bad = false;
  DFLOW_GRID_LOOP(i, n) bad |= (x[i] & exponent) == exponent;
  if (bad) *finite = false;  // every writer writes the same value
}

template <typename T>
__global__ void InvStd(const T* var, T* inv, int64_t c, double eps) {
  DFLOW_GRID_LOOP(i, c) { inv[i] = static_cast<T>(1.0 / sqrt(static_cast<double>(var[i]) + eps)); }
}

}  // namespace

int LaunchFill(ElemType type, void* out, int64_t n, double value, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  return Dispatch(type, [&]<typename T>() {
    Fill<<<Blocks(n), kThreads, 0, s>>>(static_cast<T*>(out), n, static_cast<T>(value));
    return LastError();
  });
}

int LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* out, int64_t n, int64_t c,
                  CudaStream stream) {
  if (n == 0 || c == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  return Dispatch(type, [&]<typename T>() {
    BiasAdd<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias),
                                           static_cast<T*>(out), n, c);
    return LastError();
  });
}

int LaunchReduce(ReduceMode mode, ElemType type, const void* in, void* out,
                 const ReduceIndex& index, CudaStream stream) {
  if (index.out_elements == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  const bool mean = mode == ReduceMode::kMean;
  const bool max = mode == ReduceMode::kMax;
  const int64_t blocks = index.out_elements < 65535 * 32 ? index.out_elements : 65535 * 32;
  return Dispatch(type, [&]<typename T>() {
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (index.count >= kBlockFold) {
      if (max) {
        ReduceByBlock<T, true><<<static_cast<int>(blocks), kThreads, 0, s>>>(x, y, index, mean);
      } else {
        ReduceByBlock<T, false><<<static_cast<int>(blocks), kThreads, 0, s>>>(x, y, index, mean);
      }
    } else if (max) {
      ReduceByThread<T, true><<<Blocks(index.out_elements), kThreads, 0, s>>>(x, y, index, mean);
    } else {
      ReduceByThread<T, false><<<Blocks(index.out_elements), kThreads, 0, s>>>(x, y, index, mean);
    }
    return LastError();
  });
}

int LaunchSpread(ElemType type, const void* g, void* out, int64_t n, const SpreadIndex& index,
                 double scale, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  return Dispatch(type, [&]<typename T>() {
    Spread<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(g), static_cast<T*>(out), n, index,
                                          scale);
    return LastError();
  });
}

int LaunchSparseSoftmaxXent(ElemType type, const void* logits, const void* labels, bool labels_i64,
                            void* loss, void* backprop, int64_t rows, int64_t classes,
                            CudaStream stream) {
  if (rows == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  auto launch = [&]<typename T, typename L>() {
    SoftmaxXent<<<Blocks(rows), kThreads, 0, s>>>(
        static_cast<const T*>(logits), static_cast<const L*>(labels), static_cast<T*>(loss),
        static_cast<T*>(backprop), rows, classes);
    return LastError();
  };
  if (type == ElemType::kF32) {
    return labels_i64 ? launch.template operator()<float, int64_t>()
                      : launch.template operator()<float, int32_t>();
  }
  if (type == ElemType::kF64) {
    return labels_i64 ? launch.template operator()<double, int64_t>()
                      : launch.template operator()<double, int32_t>();
  }
  return Invalid();
}

int LaunchAdam(ElemType type, const AdamArgs& args, int64_t n, CudaStream stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  auto launch = [&]<typename T>() {
    AdamFactors<T><<<1, 1, 0, s>>>(args);
    if (n > 0) Adam<T><<<Blocks(n), kThreads, 0, s>>>(args, n);
    return LastError();
  };
  if (type == ElemType::kF32) return launch.template operator()<float>();
  if (type == ElemType::kF64) return launch.template operator()<double>();
  return Invalid();
}

int LaunchMomentum(ElemType type, const MomentumArgs& args, int64_t n, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  auto launch = [&]<typename T>() {
    Momentum<T><<<Blocks(n), kThreads, 0, s>>>(args, n);
    return LastError();
  };
  if (type == ElemType::kF32) return launch.template operator()<float>();
  if (type == ElemType::kF64) return launch.template operator()<double>();
  return Invalid();
}

int LaunchClearIfNotFinite(CastType type, const void* x, int64_t n, bool* finite,
                           CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  auto launch = [&]<typename U>(U exponent) {
    ClearIfNotFinite<U>
        <<<Blocks(n), kThreads, 0, s>>>(static_cast<const U*>(x), n, exponent, finite);
    return LastError();
  };
  switch (type) {
    case CastType::kF32:
      return launch(uint32_t{0x7f800000u});
    case CastType::kF64:
      return launch(uint64_t{0x7ff0000000000000ull});
    case CastType::kF16:
      return launch(uint16_t{0x7c00u});
    case CastType::kBF16:
      return launch(uint16_t{0x7f80u});
    default:
      return Invalid();
  }
}

int LaunchInvStd(ElemType type, const void* var, void* inv, int64_t c, double eps,
                 CudaStream stream) {
  if (c == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  auto launch = [&]<typename T>() {
    InvStd<T>
        <<<Blocks(c), kThreads, 0, s>>>(static_cast<const T*>(var), static_cast<T*>(inv), c, eps);
    return LastError();
  };
  if (type == ElemType::kF32) return launch.template operator()<float>();
  if (type == ElemType::kF64) return launch.template operator()<double>();
  return Invalid();
}

}  // namespace dflow::cuda
