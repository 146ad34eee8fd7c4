// Plan-time buffer assignment for node outputs.
//
// The first run of a plan with given feed shapes records, through an AllocationRecorder, when
// each value slot's buffer is allocated and freed (buffers shared by in-place kernels and
// Identity included). MakeMemoryPattern turns those lifetimes into offsets in one arena, placing
// the largest buffers first at the lowest offset free over their lifetime, so a buffer whose
// lifetime has ended is reused by a later one that fits. Later runs with the same feed shapes
// serve their outputs from an ArenaAllocator at those offsets: no malloc, no page faults, and a
// footprint fixed per signature. Buffers that outlive a run (fetched, stored in variables) are
// never planned, nor are those a Send hands to another device (freed when that device is done). The
// arena checks every placement against the buffers live in it; on a surprise (another size, an
// overlap) the buffer takes the first free range of the arena that fits, else the device
// allocator, so a run whose order differs from the recorded one stays correct.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "framework/kernel.h"
#include "graph/allocator.h"
#include "graph/mutex.h"

namespace dflow {

struct MemoryPattern {
  struct Slot {
    size_t offset;
    size_t bytes;
  };
  std::unordered_map<int, Slot> slots;  // by value slot
  size_t arena_bytes = 0;
  size_t sum_bytes = 0;   // what the planned buffers would take without reuse
  size_t live_bytes = 0;  // the most planned bytes alive at once: no arena can be smaller
};

// One buffer of a recorded run: value slot, size, and allocation and release times (event
// counts); freed < 0 when it outlived the run. `shared`: handed to another device (a Send), so
// its release waits on that device's progress and varies from run to run.
struct RecordedBuffer {
  int slot;
  size_t bytes;
  int64_t allocated;
  int64_t freed;
  bool shared = false;
};

// Greedy by size: largest first, each at the lowest offset (64-byte aligned) not used by a placed
// buffer whose lifetime overlaps its own. Buffers that outlived the run or were shared with
// another device are left out.
MemoryPattern MakeMemoryPattern(const std::vector<RecordedBuffer>& buffers);

// Forwards to the device allocator and records output lifetimes.
class AllocationRecorder final : public Allocator, public OutputMemory {
 public:
  explicit AllocationRecorder(Allocator* device);
  ~AllocationRecorder() override;

  Allocator* ForOutput(int slot, size_t bytes) override;
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return device_->device(); }
  bool host_accessible() const override { return device_->host_accessible(); }
  size_t limit() const override { return device_->limit(); }
  size_t bytes_in_use() const override { return device_->bytes_in_use(); }
  std::optional<SharedRegion> FindShared(const void* p) const override {
    return device_->FindShared(p);
  }
  void Retire(const void* p) override { device_->Retire(p); }

  // Marks the recorded buffer holding `t` as shared with another device: a Send hands it over
  // and the receiver's progress decides when it is freed, so in another run it may still be in
  // use where the recorded order had it gone (an arena slot planned over it would clash, and
  // the fallback to the device's memory could exceed the device's limit). It is not planned.
  void MarkShared(const Tensor& t);

  // The pattern of what was recorded so far; later frees are no longer recorded.
  MemoryPattern Finish();

 private:
  Allocator* device_;
  Mutex mu_;
  int64_t clock_ DFLOW_GUARDED_BY(mu_) = 0;
  bool finished_ DFLOW_GUARDED_BY(mu_) = false;
  std::vector<RecordedBuffer> buffers_ DFLOW_GUARDED_BY(mu_);
  std::unordered_map<void*, size_t> by_ptr_ DFLOW_GUARDED_BY(mu_);  // live recorded buffer -> index
};

// Serves planned outputs from one block of the device's memory.
class ArenaAllocator final : public Allocator, public OutputMemory {
 public:
  // Null when the device has no memory for the arena.
  static Allocator* Create(Allocator* device, std::shared_ptr<const MemoryPattern> pattern);
  ~ArenaAllocator() override;

  Allocator* ForOutput(int slot, size_t bytes) override;
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return device_->device(); }
  bool host_accessible() const override { return device_->host_accessible(); }
  size_t limit() const override { return device_->limit(); }
  size_t bytes_in_use() const override { return device_->bytes_in_use(); }
  // The arena is one block of the device's: a buffer in it is shared when the arena is (a
  // retired buffer retires the whole arena, freed when the arena goes).
  std::optional<SharedRegion> FindShared(const void* p) const override {
    return device_->FindShared(p);
  }
  void Retire(const void* p) override { device_->Retire(p); }

  const MemoryPattern& pattern() const { return *pattern_; }
  // Buffers in the arena still alive.
  int live() const;
  int64_t planned() const { return planned_.load(std::memory_order_relaxed); }
  int64_t fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }

 private:
  ArenaAllocator(Allocator* device, std::shared_ptr<const MemoryPattern> pattern, char* base);

  Allocator* device_;
  std::shared_ptr<const MemoryPattern> pattern_;
  char* base_;
  mutable Mutex mu_;
  std::vector<std::pair<size_t, size_t>> live_ DFLOW_GUARDED_BY(mu_);  // [offset, end) in use
  std::atomic<int64_t> planned_{0}, fallbacks_{0};
};

}  // namespace dflow
