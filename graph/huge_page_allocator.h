// HugePageAllocator: a std::allocator for the big arrays of large graphs (a million nodes is
// about 300 MB of Node structs). Arrays of at least kMinBytes get their own mapping, aligned to
// 2 MiB and advised as transparent huge pages (MADV_HUGEPAGE), so filling them takes one page
// fault per 2 MiB instead of one per 4 KiB; on kernels where THP is "madvise" only this is what
// turns them on. Smaller arrays come from operator new as usual.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace dflow {

namespace internal {

inline constexpr size_t kHugePage = size_t{2} << 20;
inline constexpr size_t kMinHugeBytes = size_t{8} << 20;

// The mapping's start lies before the returned pointer; its size is stored just below it.
inline void* MapHuge(size_t bytes) {
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto base = reinterpret_cast<uintptr_t>(p);
  uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned == base) aligned += kHugePage;  // room for the header below
  madvise(reinterpret_cast<void*>(aligned), base + length - aligned, MADV_HUGEPAGE);
  auto* header = reinterpret_cast<size_t*>(aligned) - 2;
  header[0] = base;
  header[1] = length;
  return reinterpret_cast<void*>(aligned);
}

inline void UnmapHuge(void* p) {
  const size_t* header = static_cast<const size_t*>(p) - 2;
  munmap(reinterpret_cast<void*>(header[0]), header[1]);
}

}  // namespace internal

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= internal::kMinHugeBytes && alignof(T) <= internal::kHugePage) {
      return static_cast<T*>(internal::MapHuge(bytes));
    }
    return static_cast<T*>(::operator new(bytes, std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) >= internal::kMinHugeBytes && alignof(T) <= internal::kHugePage) {
      internal::UnmapHuge(p);
    } else {
      ::operator delete(p, std::align_val_t(alignof(T)));
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace dflow
