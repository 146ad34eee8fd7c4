#include "ops/cpu/packed_weights.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/nan_aware.h"

namespace dflow::cpu {

PackedWeights::PackedWeights(const KernelInit& init, int input)
    : constant_(static_cast<int>(init.node.inputs().size()) > input &&
                init.graph.node(init.node.inputs()[input].node).op() == "Const") {}

Result<PackedWeights::Packed> PackedWeights::Get(const dnnl::memory::desc& plain,
                                                 const dnnl::memory::desc& want, const Tensor& w,
                                                 bool check_finite) {
  const bool same = want == plain;
  if (!constant_) {
    return Packed{Tensor(), !check_finite || AllFiniteParallel(w.data<float>(), w.num_elements())};
  }
  MutexLock lock(mu_);
  Refresh(w);
  if (!same && !(desc_ == want && packed_.raw_data() != nullptr)) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(CpuAllocator::Default(), DType::kU8,
                                                Shape{static_cast<int64_t>(want.get_size())}));
    dnnl::memory from(plain, CpuEngine(), const_cast<void*>(w.raw_data()));
    dnnl::memory to(want, CpuEngine(), t.raw_data());
    dnnl::stream& s = ThreadStream();
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    packed_ = std::move(t);
    desc_ = want;
  }
  return Packed{same ? Tensor() : packed_, finite_};
}

void PackedWeights::Refresh(const Tensor& w) {
  if (source_ == w.raw_data()) return;
  finite_ = AllFiniteParallel(w.data<float>(), w.num_elements());
  packed_ = Tensor();
  norm_rows_ = 0;
  source_ = w.raw_data();
}

float PackedWeights::MaxRowAbsSum(const Tensor& w, int64_t rows) {
  constexpr float kUnknown = std::numeric_limits<float>::infinity();
  if (!constant_ || rows <= 0 || w.num_elements() % rows != 0) return kUnknown;
  MutexLock lock(mu_);
  Refresh(w);
  if (!finite_) return kUnknown;
  if (norm_rows_ != rows) {
    const int64_t cols = w.num_elements() / rows;
    const float* p = w.data<float>();
    double most = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::fabs(p[r * cols + c]);
      most = std::max(most, sum);
    }
    // Rounded up to a float, so the bound stays a bound.
    row_norm_ = std::nextafter(static_cast<float>(most), kUnknown);
    norm_rows_ = rows;
  }
  return row_norm_;
}

}  // namespace dflow::cpu
