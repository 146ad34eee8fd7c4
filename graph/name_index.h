// NameIndex: node ids by name for a Graph. An open-addressing hash table (linear probing) of
// (hash, id) pairs that keeps no copy of the names: a probe whose hash matches compares the
// name with the node's own, through the caller's `name_of(id)`. Compared with a node-based
// std::unordered_map<std::string, int>, a lookup touches one slot array instead of a bucket, a
// node and a copied string, and an insert allocates nothing (growth aside).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "graph/huge_page_allocator.h"

namespace dflow {

class NameIndex {
 public:
  // Room for n names without rehashing.
  void Reserve(size_t n) {
    if (n * 4 > slots_.size() * 3) Rehash(Capacity(n));
  }
  size_t size() const { return size_; }

  // The id named `name`, or -1.
  template <typename NameOf>
  int Find(std::string_view name, const NameOf& name_of) const {
    if (slots_.empty()) return -1;
    const uint64_t h = Hash(name);
    for (size_t i = h & mask(); slots_[i].id >= 0; i = (i + 1) & mask()) {
      if (slots_[i].hash == h && name_of(slots_[i].id) == name) return slots_[i].id;
    }
    return -1;
  }

  // Adds `id` under `name` unless the name is present; returns the id already there, or -1
  // when added.
  template <typename NameOf>
  int Insert(std::string_view name, int id, const NameOf& name_of) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Rehash(Capacity(size_ + 1));
    const uint64_t h = Hash(name);
    size_t i = h & mask();
    for (; slots_[i].id >= 0; i = (i + 1) & mask()) {
      if (slots_[i].hash == h && name_of(slots_[i].id) == name) return slots_[i].id;
    }
    slots_[i] = {h, id};
    ++size_;
    return -1;
  }

  // Removes `name` if present (backward-shift deletion: no tombstones).
  template <typename NameOf>
  void Erase(std::string_view name, const NameOf& name_of) {
    if (slots_.empty()) return;
    const uint64_t h = Hash(name);
    size_t i = h & mask();
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].id < 0) return;
      if (slots_[i].hash == h && name_of(slots_[i].id) == name) break;
    }
    // Shift later entries of the probe run back over the hole unless already home.
    for (size_t j = (i + 1) & mask(); slots_[j].id >= 0; j = (j + 1) & mask()) {
      size_t home = slots_[j].hash & mask();
      // Move j into the hole at i when its home is not cyclically within (i, j].
      if (((j - home) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    int id = -1;  // -1: empty
  };
  static uint64_t Hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static size_t Capacity(size_t n) {
    size_t c = 16;
    while (c * 3 < n * 4) c *= 2;  // load factor <= 3/4
    return c;
  }
  size_t mask() const { return slots_.size() - 1; }
  void Rehash(size_t capacity) {
    std::vector<Slot, HugePageAllocator<Slot>> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & mask();
      while (slots_[i].id >= 0) i = (i + 1) & mask();
      slots_[i] = s;
    }
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t size_ = 0;
};

}  // namespace dflow
