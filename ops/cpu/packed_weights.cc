#include "ops/cpu/packed_weights.h"

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
  if (source_ != w.raw_data()) {
    finite_ = AllFiniteParallel(w.data<float>(), w.num_elements());
    packed_ = Tensor();
    source_ = w.raw_data();
  }
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

}  // namespace dflow::cpu
