// GPU pooling with the CPU kernels' semantics (ops/cpu/pool_kernels.cc): windows clipped to the
// input, the first maximum of a window wins, averages over the elements inside. The gradients
// gather rather than scatter: one thread per input element visits the windows that hold it, in
// the CPU's order, so sums are deterministic and need no atomics. Also the 2-D window copy that
// pads and crops planes for convolutions with asymmetric pads.
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/dispatch.cuh"
#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"

namespace dflow::cuda {
namespace {

struct Window {
  int64_t r0, r1, c0, c1;  // clipped rows [r0, r1) and columns [c0, c1)
};

__device__ Window WindowOf(const PoolGeometry& g, int64_t y, int64_t x) {
  const int64_t top = y * g.sh - g.pt, left = x * g.sw - g.pl;
  return {top > 0 ? top : 0, top + g.kh < g.h ? top + g.kh : g.h, left > 0 ? left : 0,
          left + g.kw < g.w ? left + g.kw : g.w};
}

// The offset in its plane of the window's first maximum (a NaN counting as the maximum, as on
// the CPU); -1 for an empty window.
template <typename T>
__device__ int64_t ArgMax(const T* in, const PoolGeometry& g, const Window& win) {
  int64_t arg = -1;
  T best = T(0);
  for (int64_t r = win.r0; r < win.r1; ++r) {
    for (int64_t c = win.c0; c < win.c1; ++c) {
      const T v = in[r * g.w + c];
      if (arg < 0 || v > best || (v != v && best == best)) {
        best = v;
        arg = r * g.w + c;
      }
    }
  }
  return arg;
}

template <typename T>
__global__ void PoolForward(bool max, const T* x, T* y, PoolGeometry g) {
  DFLOW_GRID_LOOP(i, g.planes * g.oh * g.ow) {
    const int64_t plane = i / (g.oh * g.ow), yx = i % (g.oh * g.ow);
    const T* in = x + plane * g.h * g.w;
    const Window win = WindowOf(g, yx / g.ow, yx % g.ow);
    if (max) {
      const int64_t arg = ArgMax(in, g, win);
      y[i] = arg < 0 ? static_cast<T>(-INFINITY) : in[arg];
      continue;
    }
    T sum = 0;
    for (int64_t r = win.r0; r < win.r1; ++r) {
      for (int64_t c = win.c0; c < win.c1; ++c) sum += in[r * g.w + c];
    }
    const int64_t count = (win.r1 - win.r0) * (win.c1 - win.c0);
    y[i] = count > 0 ? sum / static_cast<T>(count) : T(0);
  }
}

// First and one-past-last output index along one axis whose window covers input index `at`.
__device__ void Covering(int64_t at, int64_t pad, int64_t k, int64_t stride, int64_t out,
                         int64_t* first, int64_t* last) {
  const int64_t hi = (at + pad) / stride;   // window start <= at
  const int64_t lo_num = at + pad - k + 1;  // window end > at
  int64_t lo = lo_num <= 0 ? 0 : (lo_num + stride - 1) / stride;
  *first = lo;
  *last = (hi + 1 < out ? hi + 1 : out);
}

template <typename T>
__global__ void PoolBackward(bool max, const T* x, const T* dy, T* dx, PoolGeometry g) {
  DFLOW_GRID_LOOP(i, g.planes * g.h * g.w) {
    const int64_t plane = i / (g.h * g.w), rc = i % (g.h * g.w);
    const int64_t r = rc / g.w, c = rc % g.w;
    const T* in = x + plane * g.h * g.w;
    const T* g_out = dy + plane * g.oh * g.ow;
    int64_t y0, y1, x0, x1;
    Covering(r, g.pt, g.kh, g.sh, g.oh, &y0, &y1);
    Covering(c, g.pl, g.kw, g.sw, g.ow, &x0, &x1);
    T sum = 0;
    for (int64_t y = y0; y < y1; ++y) {
      for (int64_t xo = x0; xo < x1; ++xo) {
        const Window win = WindowOf(g, y, xo);
        if (max) {
          if (ArgMax(in, g, win) == rc) sum += g_out[y * g.ow + xo];
        } else {
          const int64_t count = (win.r1 - win.r0) * (win.c1 - win.c0);
          sum += g_out[y * g.ow + xo] / static_cast<T>(count);
        }
      }
    }
    dx[i] = sum;
  }
}

template <typename T>
__global__ void Window2d(const T* src, int64_t sh, int64_t sw, T* dst, int64_t dh, int64_t dw,
                         int64_t planes, int64_t off_y, int64_t off_x) {
  DFLOW_GRID_LOOP(i, planes * dh * dw) {
    const int64_t plane = i / (dh * dw), yx = i % (dh * dw);
    const int64_t y = yx / dw + off_y, x = yx % dw + off_x;
    dst[i] = (y >= 0 && y < sh && x >= 0 && x < sw) ? src[(plane * sh + y) * sw + x] : T(0);
  }
}

template <typename F>
int FloatDispatch(ElemType type, F&& f) {
  if (type == ElemType::kF32) return f.template operator()<float>();
  if (type == ElemType::kF64) return f.template operator()<double>();
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int LaunchPool(PoolKind kind, ElemType type, const void* x, const void* dy, void* out,
               const PoolGeometry& g, CudaStream stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  const bool max = kind == PoolKind::kMax || kind == PoolKind::kMaxGrad;
  const bool grad = kind == PoolKind::kMaxGrad || kind == PoolKind::kAvgGrad;
  const int64_t n = g.planes * (grad ? g.h * g.w : g.oh * g.ow);
  if (n == 0) return 0;
  return FloatDispatch(type, [&]<typename T>() {
    if (grad) {
      PoolBackward<T><<<Blocks(n), kThreads, 0, s>>>(
          max, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(out), g);
    } else {
      PoolForward<T>
          <<<Blocks(n), kThreads, 0, s>>>(max, static_cast<const T*>(x), static_cast<T*>(out), g);
    }
    return LastError();
  });
}

int LaunchWindow2d(ElemType type, const void* src, int64_t src_h, int64_t src_w, void* dst,
                   int64_t dst_h, int64_t dst_w, int64_t planes, int64_t off_y, int64_t off_x,
                   CudaStream stream) {
  const int64_t n = planes * dst_h * dst_w;
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  return FloatDispatch(type, [&]<typename T>() {
    Window2d<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(src), src_h, src_w,
                                               static_cast<T*>(dst), dst_h, dst_w, planes, off_y,
                                               off_x);
    return LastError();
  });
}

}  // namespace dflow::cuda
