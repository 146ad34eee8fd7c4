// Allocator: where a Tensor's memory comes from. Each device owns one; a buffer remembers its
// allocator, so a Tensor knows which device's memory it lives in.
//
// Allocators are reference-counted: the creator holds the first reference (MakeAllocator) and
// every live buffer holds one, so a tensor fetched from a session stays valid after the session
// and its device are gone. Never delete an allocator; drop references instead.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "graph/mutex.h"
#include "graph/status.h"

namespace dflow {

inline constexpr size_t kCpuAlignment = 64;

// Where a pointer lies in memory other processes of this host can map: a memfd of this process
// (open as `fd`, with inode `inode` and `file_size` bytes) at byte `offset`.
struct SharedRegion {
  int fd = -1;
  uint64_t inode = 0;
  uint64_t offset = 0;
  uint64_t file_size = 0;
};

class Allocator {
 public:
  void Ref() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Deletes the allocator when the last reference goes.
  void Unref() const {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Returns memory of at least `bytes`, aligned to `alignment`, or null when out of memory.
  // Thread-safe.
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // REQUIRES: p came from Allocate on this allocator with the same `bytes`. Thread-safe.
  virtual void Deallocate(void* p, size_t bytes) = 0;
  // Canonical name of the device whose memory this is, e.g. "/job:localhost/task:0/device:CPU:0".
  virtual const std::string& device() const = 0;
  // True when the CPU can read and write the memory directly.
  virtual bool host_accessible() const { return true; }
  // The most bytes the device's tensors may hold at once (0: no limit of its own), and the
  // bytes they hold now; for messages when an allocation fails.
  virtual size_t limit() const { return 0; }
  virtual size_t bytes_in_use() const { return 0; }
  // The shared memory holding `p` (see CpuAllocator::set_shareable); none by default.
  virtual std::optional<SharedRegion> FindShared(const void* p) const { return std::nullopt; }
  // The block holding `p` goes back to the system when freed, never to another tensor: a
  // process that mapped it may still read it. No-op by default.
  virtual void Retire(const void* p) {}
  // A handle by which another process of this host reads the `bytes` at `p` (CUDA IPC for a
  // GPU's tensor on its way out, ops/cuda/cuda_ipc.h), valid until the last tensor over this
  // memory is dropped. Unimplemented, naming the device, by default.
  virtual Result<std::string> ExportToPeer(const void* p, size_t bytes) {
    return Unimplemented("memory of {} is not exported to other processes", device());
  }

 protected:
  virtual ~Allocator() = default;

 private:
  mutable std::atomic<int> refs_{1};
};

struct AllocatorUnref {
  void operator()(const Allocator* a) const { a->Unref(); }
};
// Owns one reference to an allocator.
template <typename A>
using AllocatorPtr = std::unique_ptr<A, AllocatorUnref>;

template <typename A, typename... Args>
AllocatorPtr<A> MakeAllocator(Args&&... args) {
  return AllocatorPtr<A>(new A(std::forward<Args>(args)...));
}

// Host memory aligned to kCpuAlignment, counting bytes in use and the peak. Freed blocks of
// 64 KiB and more are kept by size and handed out again (up to kMaxCachedBytes), so a training
// loop reuses its large activation buffers instead of faulting fresh pages in every step. With a
// limit set, an allocation that would take the bytes in use past it fails (returns null) before
// any memory is asked of the system; cached blocks are released first when they stand in the
// way.
//
// A shareable allocator (a worker's) makes each block of kMinCachedBlock and more a memfd of its
// own, mapped here, so a process of this host can map it too (/proc/PID/fd/FD) and read a tensor
// without a copy (transport/ucx_by_reference.cc); when memfds run out it falls back to plain
// blocks.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kMinCachedBlock = 64 * 1024;
  static constexpr size_t kMaxCachedBytes = size_t{512} << 20;

  explicit CpuAllocator(std::string device) : device_(std::move(device)) {}
  ~CpuAllocator() override;
  // The process-wide allocator for tensors made outside any device (Tensor's constructor, Const
  // values); named /job:localhost/task:0/device:CPU:0; never freed.
  static CpuAllocator* Default();

  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return device_; }

  // 0: no limit. Set before the allocator is shared between threads.
  void set_limit(size_t bytes) { limit_ = bytes; }
  size_t limit() const override { return limit_; }
  // Bytes in tensors now, and the most at once; cached free blocks are not counted.
  size_t bytes_in_use() const override { return in_use_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  void ResetPeak() { peak_.store(bytes_in_use(), std::memory_order_relaxed); }
  size_t cached_bytes() const DFLOW_EXCLUDES(cache_mu_);

  // Set before the allocator is shared between threads. At most a quarter of the process's
  // file descriptors (RLIMIT_NOFILE) become memfds, so sockets and files still open.
  void set_shareable(bool shareable);
  std::optional<SharedRegion> FindShared(const void* p) const override DFLOW_EXCLUDES(cache_mu_);
  void Retire(const void* p) override DFLOW_EXCLUDES(cache_mu_);
  // Blocks that are memfds now (in tensors or cached).
  size_t shared_blocks() const DFLOW_EXCLUDES(cache_mu_);

 private:
  static size_t BlockSize(size_t bytes, size_t alignment);
  // Frees cached blocks, largest first, until at most `keep` bytes stay cached.
  void ReleaseCacheOver(size_t keep) DFLOW_EXCLUDES(cache_mu_);
  // A memfd of `block` bytes mapped here, or null.
  void* AllocateShared(size_t block) DFLOW_EXCLUDES(cache_mu_);
  // Gives a block back to the system, however it was made.
  void FreeBlock(void* p) DFLOW_REQUIRES(cache_mu_);

  std::string device_;
  size_t limit_ = 0;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
  mutable Mutex cache_mu_;
  std::multimap<size_t, void*> cache_ DFLOW_GUARDED_BY(cache_mu_);  // block size -> block
  size_t cached_ DFLOW_GUARDED_BY(cache_mu_) = 0;
  bool shareable_ = false;
  size_t max_shared_blocks_ = 0;
  struct SharedBlock {
    int fd = -1;
    uint64_t inode = 0;
    size_t size = 0;
    bool retired = false;
  };
  // The memfd blocks by start address.
  std::map<uintptr_t, SharedBlock> shared_ DFLOW_GUARDED_BY(cache_mu_);
};

}  // namespace dflow
