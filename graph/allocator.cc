#include "graph/allocator.h"

#include <algorithm>
#include <cstdlib>

namespace dflow {

CpuAllocator* CpuAllocator::Default() {
  static auto* allocator = new CpuAllocator("/job:localhost/task:0/device:CPU:0");
  return allocator;
}

void* CpuAllocator::Allocate(size_t bytes, size_t alignment) {
  alignment = std::max(alignment, kCpuAlignment);
  size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) return nullptr;
  size_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void CpuAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  std::free(p);
}

}  // namespace dflow
