// Allocator: where a Tensor's memory comes from. Each device owns one; a buffer remembers its
// allocator, so a Tensor knows which device's memory it lives in.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "graph/status.h"

namespace dflow {

inline constexpr size_t kCpuAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory of at least `bytes`, aligned to `alignment`, or null when out of memory.
  // Thread-safe.
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // REQUIRES: p came from Allocate on this allocator with the same `bytes`. Thread-safe.
  virtual void Deallocate(void* p, size_t bytes) = 0;
  // Canonical name of the device whose memory this is, e.g. "/job:localhost/task:0/device:CPU:0".
  virtual const std::string& device() const = 0;
  // True when the CPU can read and write the memory directly.
  virtual bool host_accessible() const { return true; }
};

// Host memory aligned to kCpuAlignment, counting bytes in use and the peak.
class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(std::string device) : device_(std::move(device)) {}
  // The allocator of the default CPU device, /job:localhost/task:0/device:CPU:0; never freed.
  static CpuAllocator* Default();

  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return device_; }

  size_t bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  void ResetPeak() { peak_.store(bytes_in_use(), std::memory_order_relaxed); }

 private:
  std::string device_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace dflow
