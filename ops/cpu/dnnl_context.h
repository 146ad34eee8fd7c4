// Internal: the oneDNN CPU engine and a stream per thread.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace dflow::cpu {

dnnl::engine& CpuEngine();
// A stream on CpuEngine() owned by the calling thread.
dnnl::stream& ThreadStream();
// A 64-byte aligned buffer of at least `bytes` owned by the calling thread, for oneDNN
// scratchpads; valid until the thread's next call.
void* ThreadScratchpad(size_t bytes);

}  // namespace dflow::cpu
