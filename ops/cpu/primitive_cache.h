// A process-wide, bounded cache of oneDNN primitives and whatever a kernel derives with them
// (memory descriptors, scratchpad sizes), keyed by a string that names the operation, its shapes
// and its attributes. Kernels of every node share it, so two nodes of one geometry build one
// primitive, and a graph whose shapes change keeps at most `capacity` entries alive: the least
// recently used entry goes first. The capacity defaults to 1024 and can be set with the
// environment variable DFLOW_PRIMITIVE_CACHE_CAPACITY (read once) or SetCapacity.
#pragma once

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

}  // namespace dflow::cpu
