// CompileCache: a session's compiled steps by signature key (runtime/run_signature.h). The first
// run of a signature compiles it, outside the cache's lock: runs of other signatures go on, and
// only runs of the same signature wait for it. A signature that failed to compile is not kept
// (the error may depend on the feeds given), so the next run tries again.
//
//   ASSIGN_OR_RETURN(const Plan* plan, cache.GetOrCompile(key, [&] { return Compile(...); }));
//
// Entries live as long as the cache; Get hands out pointers to them. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"

namespace dflow {

template <typename T>
class CompileCache {
 public:
  using CompileFn = std::function<Result<std::unique_ptr<T>>()>;

  // The entry of `key`, made by `compile` when there is none yet.
  Result<const T*> GetOrCompile(const std::string& key, const CompileFn& compile)
      DFLOW_EXCLUDES(mu_) {
    std::shared_ptr<Entry> entry;
    {
      MutexLock lock(mu_);
      auto& slot = entries_[key];
      if (!slot) slot = std::make_shared<Entry>();
      entry = slot;
    }
    MutexLock lock(entry->mu);
    if (!entry->done) {
      auto made = compile();
      if (made.ok()) {
        entry->value = std::move(made).value();
      } else {
        entry->status = made.status();
      }
      entry->done = true;
    }
    if (!entry->status.ok()) {
      Status s = entry->status;
      MutexLock cache_lock(mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second == entry) entries_.erase(it);
      return s;
    }
    return entry->value.get();
  }

  // Entries compiled or being compiled.
  int size() const DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return static_cast<int>(entries_.size());
  }

  // The entries compiled so far (for a session that releases them elsewhere as it goes).
  std::vector<const T*> Compiled() const DFLOW_EXCLUDES(mu_) {
    std::vector<std::shared_ptr<Entry>> all;
    {
      MutexLock lock(mu_);
      for (const auto& [key, entry] : entries_) all.push_back(entry);
    }
    std::vector<const T*> out;
    for (const auto& entry : all) {
      MutexLock lock(entry->mu);
      if (entry->done && entry->value) out.push_back(entry->value.get());
    }
    return out;
  }

 private:
  struct Entry {
    Mutex mu;
    bool done DFLOW_GUARDED_BY(mu) = false;
    Status status DFLOW_GUARDED_BY(mu);
    std::unique_ptr<T> value DFLOW_GUARDED_BY(mu);  // immutable once done
  };
  mutable Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
