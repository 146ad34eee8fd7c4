// Internal: the oneDNN CPU engine and a stream per thread.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace dflow::cpu {

dnnl::engine& CpuEngine();
// A stream on CpuEngine() owned by the calling thread.
dnnl::stream& ThreadStream();

}  // namespace dflow::cpu
