#include "ops/cpu/dnnl_context.h"

namespace dflow::cpu {

dnnl::engine& CpuEngine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

}  // namespace dflow::cpu
