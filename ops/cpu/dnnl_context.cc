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

void* ThreadScratchpad(size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    capacity = (bytes + 4095) / 4096 * 4096;
    buffer.reset(std::aligned_alloc(64, capacity));
  }
  return buffer.get();
}

}  // namespace dflow::cpu
