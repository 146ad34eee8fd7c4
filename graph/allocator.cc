#include "graph/allocator.h"

#include <algorithm>
#include <cstdlib>

namespace dflow {

CpuAllocator* CpuAllocator::Default() {
  static auto* allocator = new CpuAllocator("/job:localhost/task:0/device:CPU:0");
  return allocator;
}

CpuAllocator::~CpuAllocator() {
  for (auto& [size, p] : cache_) std::free(p);
}

size_t CpuAllocator::BlockSize(size_t bytes, size_t alignment) {
  size_t quantum = bytes >= kMinCachedBlock ? 4096 : alignment;
  return (std::max<size_t>(bytes, 1) + quantum - 1) / quantum * quantum;
}

size_t CpuAllocator::cached_bytes() const {
  MutexLock lock(cache_mu_);
  return cached_;
}

void* CpuAllocator::Allocate(size_t bytes, size_t alignment) {
  alignment = std::max(alignment, kCpuAlignment);
  size_t block = BlockSize(bytes, alignment);
  // Reserve the bytes first, so concurrent allocations cannot pass the limit together.
  size_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (limit_ != 0 && now > limit_) {
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    return nullptr;
  }
  void* p = nullptr;
  if (block >= kMinCachedBlock && alignment <= 4096) {
    MutexLock lock(cache_mu_);
    auto it = cache_.find(block);
    if (it != cache_.end()) {
      p = it->second;
      cached_ -= block;
      cache_.erase(it);
    }
  }
  if (p == nullptr && limit_ != 0) ReleaseCacheOver(limit_ - std::min(limit_, now));
  if (p == nullptr) {
    p = std::aligned_alloc(block >= kMinCachedBlock ? std::max<size_t>(alignment, 4096) : alignment,
                           block);
  }
  if (p == nullptr) {
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    return nullptr;
  }
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void CpuAllocator::ReleaseCacheOver(size_t keep) {
  MutexLock lock(cache_mu_);
  while (cached_ > keep && !cache_.empty()) {
    auto it = std::prev(cache_.end());  // largest first
    cached_ -= it->first;
    std::free(it->second);
    cache_.erase(it);
  }
}

void CpuAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  size_t block = BlockSize(bytes, kCpuAlignment);
  if (block >= kMinCachedBlock) {
    MutexLock lock(cache_mu_);
    if (cached_ + block <= kMaxCachedBytes) {
      cache_.emplace(block, p);
      cached_ += block;
      return;
    }
  }
  std::free(p);
}

}  // namespace dflow
