#include "graph/allocator.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace dflow {
namespace {

// The entry of `blocks` (by start address, each with its size) whose block holds `at`, or end.
template <typename Blocks>
auto BlockHolding(Blocks& blocks, uintptr_t at) -> decltype(blocks.begin()) {
  auto it = blocks.upper_bound(at);
  if (it == blocks.begin()) return blocks.end();
  --it;
  return at - it->first < it->second.size ? it : blocks.end();
}

}  // namespace

CpuAllocator* CpuAllocator::Default() {
  static auto* allocator = new CpuAllocator("/job:localhost/task:0/device:CPU:0");
  return allocator;
}

CpuAllocator::~CpuAllocator() {
  MutexLock lock(cache_mu_);
  for (auto& [size, p] : cache_) FreeBlock(p);
}

void CpuAllocator::set_shareable(bool shareable) {
  shareable_ = shareable;
  rlimit files{};
  max_shared_blocks_ = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                           ? static_cast<size_t>(files.rlim_cur / 4)
                           : 256;
}

void* CpuAllocator::AllocateShared(size_t block) {
  {
    MutexLock lock(cache_mu_);
    if (shared_.size() >= max_shared_blocks_) return nullptr;
  }
  int fd = memfd_create("dflow-tensor", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(block)) == 0 && fstat(fd, &st) == 0) {
    p = mmap(nullptr, block, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  MutexLock lock(cache_mu_);
  shared_[reinterpret_cast<uintptr_t>(p)] = {fd, static_cast<uint64_t>(st.st_ino), block, false};
  return p;
}

void CpuAllocator::FreeBlock(void* p) {
  auto it = shared_.find(reinterpret_cast<uintptr_t>(p));
  if (it == shared_.end()) {
    std::free(p);
    return;
  }
  munmap(p, it->second.size);
  close(it->second.fd);
  shared_.erase(it);
}

std::optional<SharedRegion> CpuAllocator::FindShared(const void* p) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  MutexLock lock(cache_mu_);
  auto it = BlockHolding(shared_, at);
  if (it == shared_.end()) return std::nullopt;
  const SharedBlock& b = it->second;
  return SharedRegion{b.fd, b.inode, at - it->first, b.size};
}

void CpuAllocator::Retire(const void* p) {
  MutexLock lock(cache_mu_);
  auto it = BlockHolding(shared_, reinterpret_cast<uintptr_t>(p));
  if (it != shared_.end()) it->second.retired = true;
}

size_t CpuAllocator::shared_blocks() const {
  MutexLock lock(cache_mu_);
  return shared_.size();
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
  if (p == nullptr && shareable_ && block >= kMinCachedBlock && alignment <= 4096) {
    p = AllocateShared(block);
  }
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
    FreeBlock(it->second);
    cache_.erase(it);
  }
}

void CpuAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  size_t block = BlockSize(bytes, kCpuAlignment);
  if (block >= kMinCachedBlock) {
    MutexLock lock(cache_mu_);
    auto shared = shared_.find(reinterpret_cast<uintptr_t>(p));
    const bool retired = shared != shared_.end() && shared->second.retired;
    if (!retired && cached_ + block <= kMaxCachedBytes) {
      cache_.emplace(block, p);
      cached_ += block;
      return;
    }
    FreeBlock(p);
    return;
  }
  std::free(p);
}

}  // namespace dflow
