#include "framework/progress.h"

#include <algorithm>
#include <atomic>

#include "graph/mutex.h"

namespace dflow {

struct PollingScope::Entry {
  ProgressEngine* engine = nullptr;
  Mutex mu;
  CondVar idle;
  int scopes DFLOW_GUARDED_BY(mu) = 0;  // open scopes polling it
  bool removed DFLOW_GUARDED_BY(mu) = false;
};

namespace {

struct Registry {
  Mutex mu;
  std::vector<std::shared_ptr<PollingScope::Entry>> entries DFLOW_GUARDED_BY(mu);
  std::atomic<int> count{0};
};

Registry& TheRegistry() {
  static auto* registry = new Registry;  // never destroyed: scopes may outlive static teardown
  return *registry;
}

}  // namespace

void AddProgressEngine(ProgressEngine* engine) {
  Registry& r = TheRegistry();
  auto entry = std::make_shared<PollingScope::Entry>();
  entry->engine = engine;
  MutexLock lock(r.mu);
  r.entries.push_back(std::move(entry));
  r.count.store(static_cast<int>(r.entries.size()), std::memory_order_release);
}

void RemoveProgressEngine(ProgressEngine* engine) {
  Registry& r = TheRegistry();
  std::shared_ptr<PollingScope::Entry> entry;
  {
    MutexLock lock(r.mu);
    auto it = std::find_if(r.entries.begin(), r.entries.end(),
                           [&](const auto& e) { return e->engine == engine; });
    if (it == r.entries.end()) return;
    entry = *it;
    r.entries.erase(it);
    r.count.store(static_cast<int>(r.entries.size()), std::memory_order_release);
  }
  MutexLock lock(entry->mu);
  entry->removed = true;
  entry->idle.Wait(entry->mu, [&]() DFLOW_REQUIRES(entry->mu) { return entry->scopes == 0; });
}

PollingScope::PollingScope() {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return;
  {
    MutexLock lock(r.mu);
    for (const auto& entry : r.entries) {
      MutexLock hold(entry->mu);
      if (entry->removed) continue;
      entry->scopes++;
      engines_.push_back(entry);
    }
  }
  for (const auto& entry : engines_) entry->engine->BeginPolling();
}

PollingScope::~PollingScope() {
  for (const auto& entry : engines_) {
    entry->engine->EndPolling();
    MutexLock lock(entry->mu);
    if (--entry->scopes == 0) entry->idle.NotifyAll();
  }
}

bool PollingScope::Poll() {
  bool busy = false;
  for (const auto& entry : engines_) busy |= entry->engine->Poll();
  return busy;
}

}  // namespace dflow
