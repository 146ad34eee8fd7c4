#include "ops/cpu/dnnl_context.h"

#include <cstdlib>
#include <memory>

namespace dflow::cpu {

dnnl::engine& CpuEngine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

Result<void*> TempBuffers::Get(size_t bytes) {
  if (bytes == 0) return nullptr;
  ASSIGN_OR_RETURN(Tensor t,
                   Tensor::Allocate(allocator_, DType::kU8, Shape{static_cast<int64_t>(bytes)}));
  held_.push_back(std::move(t));
  return held_.back().raw_data();
}

}  // namespace dflow::cpu
