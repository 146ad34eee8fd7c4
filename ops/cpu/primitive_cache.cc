#include "ops/cpu/primitive_cache.h"

#include <omp.h>

#include <cstdlib>

namespace dflow::cpu {

PrimitiveCache& PrimitiveCache::Global() {
  static auto* cache = [] {
    size_t capacity = 1024;
    if (const char* env = std::getenv("DFLOW_PRIMITIVE_CACHE_CAPACITY")) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(env, &end, 10);
      if (end != env && *end == '\0') capacity = static_cast<size_t>(v);
    }
    return new PrimitiveCache(capacity);
  }();
  return *cache;
}

int CallingTeamSize() { return omp_get_max_threads(); }

std::string PrimitiveCache::TeamKey(const std::string& key) {
  return "t" + std::to_string(CallingTeamSize()) + ":" + key;
}

std::shared_ptr<const void> PrimitiveCache::Find(const std::string& key) {
  MutexLock lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

std::shared_ptr<const void> PrimitiveCache::Insert(const std::string& key,
                                                   std::shared_ptr<const void> value) {
  MutexLock lock(mu_);
  if (capacity_ == 0) return value;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // another thread made it first
  lru_.emplace_front(key, value);
  index_.emplace(key, lru_.begin());
  EvictToCapacity();
  return value;
}

void PrimitiveCache::EvictToCapacity() {
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

void PrimitiveCache::SetCapacity(size_t capacity) {
  MutexLock lock(mu_);
  capacity_ = capacity;
  EvictToCapacity();
}

PrimitiveCache::Stats PrimitiveCache::stats() const {
  MutexLock lock(mu_);
  Stats s = stats_;
  s.size = lru_.size();
  s.capacity = capacity_;
  return s;
}

void PrimitiveCache::Clear() {
  MutexLock lock(mu_);
  lru_.clear();
  index_.clear();
}

}  // namespace dflow::cpu
