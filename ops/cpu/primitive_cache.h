// A process-wide, bounded cache of oneDNN primitives and whatever a kernel derives with them
// (memory descriptors, scratchpad sizes), keyed by a string that names the operation, its shapes
// and its attributes. Kernels of every node share it, so two nodes of one geometry build one
// primitive, and a graph whose shapes change keeps at most `capacity` entries alive: the least
// recently used entry goes first. The capacity defaults to 1024 and can be set with the
// environment variable DFLOW_PRIMITIVE_CACHE_CAPACITY (read once) or SetCapacity.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "graph/mutex.h"

namespace dflow::cpu {

class PrimitiveCache {
 public:
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    size_t size = 0;
    size_t capacity = 0;
  };

  static PrimitiveCache& Global();
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

  // The entry for `key`, made with make() (returning std::shared_ptr<const T>) on a miss. Keys
  // must be unique across types: start them with the kind of entry ("matmul:", "conv:fwd:").
  // Entries are kept per OpenMP team size of the calling thread (omp_get_max_threads()): oneDNN
  // fixes a primitive's thread count when it is made, so a primitive made by a device of one
  // thread would run a device of two on one thread, and one made for two would oversubscribe a
  // device of one.
  // Two threads missing at once may both call make(); the first insert wins. An evicted entry
  // stays valid for whoever still holds it.
  template <typename T, typename Make>
  std::shared_ptr<const T> GetOrCreate(const std::string& key, Make&& make) {
    const std::string full = TeamKey(key);
    if (std::shared_ptr<const void> hit = Find(full)) {
      return std::static_pointer_cast<const T>(std::move(hit));
    }
    std::shared_ptr<const T> made = make();
    return std::static_pointer_cast<const T>(Insert(full, std::move(made)));
  }

  // Capacity 0 disables caching (every lookup makes a fresh entry). Shrinking evicts at once.
  void SetCapacity(size_t capacity) DFLOW_EXCLUDES(mu_);
  Stats stats() const DFLOW_EXCLUDES(mu_);
  void Clear() DFLOW_EXCLUDES(mu_);

 private:
  // `key` with the calling thread's OpenMP team size.
  static std::string TeamKey(const std::string& key);
  std::shared_ptr<const void> Find(const std::string& key) DFLOW_EXCLUDES(mu_);
  std::shared_ptr<const void> Insert(const std::string& key, std::shared_ptr<const void> value)
      DFLOW_EXCLUDES(mu_);
  void EvictToCapacity() DFLOW_REQUIRES(mu_);  // REQUIRES: mu_ held

  using Entry = std::pair<std::string, std::shared_ptr<const void>>;
  mutable Mutex mu_;
  size_t capacity_ DFLOW_GUARDED_BY(mu_);
  std::list<Entry> lru_ DFLOW_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_ DFLOW_GUARDED_BY(mu_);
  Stats stats_ DFLOW_GUARDED_BY(mu_);
};

// In front of the process-wide cache, for one kernel: the entries it ran last, under a key of
// what made them (a convolution's geometry and form) and the OpenMP team size, so that a run of
// the shapes of one of its last `N` runs finds its primitive by comparing keys instead of
// formatting and looking up the cache's string key (3 us a run, which a 30 us convolution feels).
// `Key` is equality-comparable. Safe to call from concurrent runs of the kernel.
template <typename Key, typename T, int N = 2>
class PrimitiveMemo {
 public:
  // The entry for `key` and the calling thread's team size, or make() (a std::shared_ptr<const
  // T>, from PrimitiveCache::GetOrCreate usually) kept in place of the oldest.
  template <typename Make>
  std::shared_ptr<const T> Get(const Key& key, Make&& make) DFLOW_EXCLUDES(mu_) {
    const int team = TeamSize();
    {
      MutexLock lock(mu_);
      for (const Entry& e : entries_) {
        if (e.value != nullptr && e.team == team && e.key == key) return e.value;
      }
    }
    std::shared_ptr<const T> made = make();
    MutexLock lock(mu_);
    entries_[next_] = Entry{key, team, made};
    next_ = (next_ + 1) % N;
    return made;
  }

 private:
  static int TeamSize();

  struct Entry {
    Key key{};
    int team = 0;
    std::shared_ptr<const T> value;
  };
  Mutex mu_;
  std::array<Entry, N> entries_ DFLOW_GUARDED_BY(mu_);
  int next_ DFLOW_GUARDED_BY(mu_) = 0;
};

// omp_get_max_threads(), kept out of this header's includes.
int CallingTeamSize();

template <typename Key, typename T, int N>
int PrimitiveMemo<Key, T, N>::TeamSize() {
  return CallingTeamSize();
}

}  // namespace dflow::cpu
