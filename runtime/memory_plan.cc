#include "runtime/memory_plan.h"

#include <algorithm>

namespace dflow {
namespace {

// The buffer a planned or recorded ForOutput promised to the next Allocate on this thread.
thread_local int t_slot = -1;
thread_local void* t_placed = nullptr;

constexpr size_t kArenaAlignment = 64;
constexpr size_t kArenaBaseAlignment = 256;

size_t AlignUp(size_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// The lowest offset where `size` bytes overlap none of the [lo, hi) regions in `busy`.
size_t LowestFreeOffset(std::vector<std::pair<size_t, size_t>> busy, size_t size) {
  std::sort(busy.begin(), busy.end());
  size_t offset = 0;
  for (const auto& [lo, hi] : busy) {
    if (lo >= offset + size) break;  // the gap before this region fits
    offset = std::max(offset, hi);
  }
  return offset;
}

}  // namespace

MemoryPattern MakeMemoryPattern(const std::vector<RecordedBuffer>& buffers) {
  std::vector<const RecordedBuffer*> order;
  std::unordered_map<int, int> seen;  // a slot allocated twice in one run is not planned
  for (const auto& b : buffers) seen[b.slot]++;
  for (const auto& b : buffers) {
    if (b.freed >= 0 && !b.shared && b.bytes > 0 && seen[b.slot] == 1) order.push_back(&b);
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const RecordedBuffer* a, const RecordedBuffer* b) { return a->bytes > b->bytes; });
  MemoryPattern p;
  struct Placed {
    size_t offset, end;
    int64_t from, to;
  };
  std::vector<Placed> placed;
  for (const RecordedBuffer* b : order) {
    size_t size = AlignUp(b->bytes);
    // Regions of placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const auto& q : placed) {
      if (q.from < b->freed && b->allocated < q.to) busy.push_back({q.offset, q.end});
    }
    const size_t offset = LowestFreeOffset(std::move(busy), size);
    placed.push_back({offset, offset + size, b->allocated, b->freed});
    p.slots[b->slot] = {offset, b->bytes};
    p.arena_bytes = std::max(p.arena_bytes, offset + size);
    p.sum_bytes += size;
  }
  std::vector<std::pair<int64_t, int64_t>> events;  // (time, +size or -size)
  for (const RecordedBuffer* b : order) {
    events.push_back({b->allocated, static_cast<int64_t>(AlignUp(b->bytes))});
    events.push_back({b->freed, -static_cast<int64_t>(AlignUp(b->bytes))});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [t, delta] : events) {
    live += delta;
    p.live_bytes = std::max(p.live_bytes, static_cast<size_t>(std::max<int64_t>(live, 0)));
  }
  return p;
}

AllocationRecorder::AllocationRecorder(Allocator* device) : device_(device) { device_->Ref(); }
AllocationRecorder::~AllocationRecorder() { device_->Unref(); }

Allocator* AllocationRecorder::ForOutput(int slot, size_t) {
  t_slot = slot;
  return this;
}

void* AllocationRecorder::Allocate(size_t bytes, size_t alignment) {
  void* p = device_->Allocate(bytes, alignment);
  int slot = t_slot;
  t_slot = -1;
  if (p == nullptr || slot < 0) return p;
  MutexLock lock(mu_);
  if (finished_) return p;
  by_ptr_[p] = buffers_.size();
  buffers_.push_back({slot, bytes, clock_++, -1});
  return p;
}

void AllocationRecorder::Deallocate(void* p, size_t bytes) {
  {
    MutexLock lock(mu_);
    auto it = by_ptr_.find(p);
    if (it != by_ptr_.end()) {
      if (!finished_) buffers_[it->second].freed = clock_++;
      by_ptr_.erase(it);
    }
  }
  device_->Deallocate(p, bytes);
}

void AllocationRecorder::MarkShared(const Tensor& t) {
  const char* data = static_cast<const char*>(t.raw_data());
  if (data == nullptr) return;
  MutexLock lock(mu_);
  if (finished_) return;
  for (const auto& [p, index] : by_ptr_) {
    RecordedBuffer& b = buffers_[index];
    const char* begin = static_cast<const char*>(p);
    if (begin <= data && data < begin + b.bytes) {
      b.shared = true;
      return;
    }
  }
}

MemoryPattern AllocationRecorder::Finish() {
  MutexLock lock(mu_);
  finished_ = true;
  return MakeMemoryPattern(buffers_);
}

Allocator* ArenaAllocator::Create(Allocator* device, std::shared_ptr<const MemoryPattern> pattern) {
  // 256 bytes: what every device's allocator offers (a GPU's pool gives no more) and more than
  // the slots need (kArenaAlignment).
  void* base = device->Allocate(std::max<size_t>(pattern->arena_bytes, 1), kArenaBaseAlignment);
  if (base == nullptr) return nullptr;
  return new ArenaAllocator(device, std::move(pattern), static_cast<char*>(base));
}

ArenaAllocator::ArenaAllocator(Allocator* device, std::shared_ptr<const MemoryPattern> pattern,
                               char* base)
    : device_(device), pattern_(std::move(pattern)), base_(base) {
  device_->Ref();
}

ArenaAllocator::~ArenaAllocator() {
  device_->Deallocate(base_, std::max<size_t>(pattern_->arena_bytes, 1));
  device_->Unref();
}

Allocator* ArenaAllocator::ForOutput(int slot, size_t bytes) {
  auto it = pattern_->slots.find(slot);
  if (it == pattern_->slots.end()) return nullptr;
  const MemoryPattern::Slot& s = it->second;
  const size_t size = AlignUp(bytes);
  size_t offset = s.offset;
  {
    MutexLock lock(mu_);
    bool clash = s.bytes != bytes;
    for (const auto& [lo, hi] : live_) clash = clash || (lo < offset + size && offset < hi);
    if (clash) {
      // This run's order differs from the recorded one (a buffer's last reader finished later,
      // or the size changed): the first free range of the arena that fits, else the device.
      offset = LowestFreeOffset(live_, size);
      if (offset + size > pattern_->arena_bytes) {
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    live_.push_back({offset, offset + size});
  }
  planned_.fetch_add(1, std::memory_order_relaxed);
  t_placed = base_ + offset;
  return this;
}

void* ArenaAllocator::Allocate(size_t bytes, size_t alignment) {
  void* p = t_placed;
  t_placed = nullptr;
  return p != nullptr ? p : device_->Allocate(bytes, alignment);
}

void ArenaAllocator::Deallocate(void* p, size_t bytes) {
  char* c = static_cast<char*>(p);
  if (c < base_ || c >= base_ + pattern_->arena_bytes) {
    device_->Deallocate(p, bytes);
    return;
  }
  size_t offset = static_cast<size_t>(c - base_);
  MutexLock lock(mu_);
  for (size_t i = 0; i < live_.size(); ++i) {
    if (live_[i].first == offset) {
      live_[i] = live_.back();
      live_.pop_back();
      return;
    }
  }
}

int ArenaAllocator::live() const {
  MutexLock lock(mu_);
  return static_cast<int>(live_.size());
}

}  // namespace dflow
