// Internal: the oneDNN CPU engine and a stream per thread.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "graph/tensor.h"

namespace dflow::cpu {

dnnl::engine& CpuEngine();
// A stream on CpuEngine() owned by the calling thread.
dnnl::stream& ThreadStream();
// Memory a kernel needs while it runs (oneDNN scratchpads, copies staged in a primitive's
// layout), from the device's allocator, so it counts against the device's memory limit and in
// its step statistics. Freed when the object goes.
class TempBuffers {
 public:
  explicit TempBuffers(Allocator* allocator) : allocator_(allocator) {}
  // A buffer of `bytes` (64-byte aligned), or null for 0 bytes. ResourceExhausted names the
  // device and the size.
  Result<void*> Get(size_t bytes);

 private:
  Allocator* allocator_;
  std::vector<Tensor> held_;
};

}  // namespace dflow::cpu
