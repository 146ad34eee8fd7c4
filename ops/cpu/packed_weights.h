// Internal: the weights of a convolution or matrix product that come from a constant (an
// imported model's), reordered into the layout the oneDNN primitive wants (and checked for NaN
// and infinities) once, instead of on every run. Weights that are not a Const (a variable, a
// computed tensor) are staged by the kernel on every run, as before.
//
// The packed copy lives where the constants' own values do, in the process's memory outside
// any device's limit (CpuAllocator::Default()): the placer counts each constant once on its
// device, and a device limit the placement fits keeps fitting. The process holds both copies.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "framework/kernel.h"
#include "graph/mutex.h"

namespace dflow::cpu {

class PackedWeights {
 public:
  // The weights are input `input` of the kernel's node.
  PackedWeights(const KernelInit& init, int input);

  // Whether the weights come from a Const.
  bool constant() const { return constant_; }

  struct Packed {
    // w in the wanted layout, or empty: the kernel stages it on this run. Held by the run, so a
    // concurrent run that repacks (other weights, another layout) cannot free it underneath.
    Tensor data;
    bool finite;  // no NaN or infinity in w (checked only when asked, for non-constants)
  };
  // `w`, stored as `plain`, in layout `want`; kept until the kernel goes or a run brings other
  // weights.
  Result<Packed> Get(const dnnl::memory::desc& plain, const dnnl::memory::desc& want,
                     const Tensor& w, bool check_finite);

  // For a constant w of `rows` rows of contiguous floats (a convolution's [O, ...] filter, a
  // grouped one's [G * O/G, ...]): the largest sum of magnitudes along a row, so that no output
  // of the convolution exceeds it times the inputs' largest magnitude (plus bias and rounding).
  // Computed once per constant; +infinity for weights that are not a Const or not all finite.
  float MaxRowAbsSum(const Tensor& w, int64_t rows);

 private:
  // Forgets what was computed of other weights than `w`.
  void Refresh(const Tensor& w) DFLOW_REQUIRES(mu_);

  const bool constant_;
  Mutex mu_;
  const void* source_ DFLOW_GUARDED_BY(mu_) = nullptr;
  bool finite_ DFLOW_GUARDED_BY(mu_) = false;
  int64_t norm_rows_ DFLOW_GUARDED_BY(mu_) = 0;  // 0: row_norm_ not computed
  float row_norm_ DFLOW_GUARDED_BY(mu_) = 0;
  dnnl::memory::desc desc_ DFLOW_GUARDED_BY(mu_);
  Tensor packed_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow::cpu
