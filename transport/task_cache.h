// TaskCache: the task of each device name a transport has seen (TaskOfDevice, remembered), so
// that the Sends and arriving tensors of every step do not parse the same names again.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "graph/device_name.h"
#include "graph/mutex.h"

namespace dflow::transport {

// Thread-safe. Names come from the network too: the cache stays bounded whatever arrives.
class TaskCache {
 public:
  static constexpr size_t kMaxEntries = 1024;

  // TaskOfDevice(device), from the cache when seen before.
  Result<std::string> TaskOf(std::string_view device) DFLOW_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      auto it = tasks_.find(device);
      if (it != tasks_.end()) return it->second;
    }
    ASSIGN_OR_RETURN(std::string task, TaskOfDevice(device));
    MutexLock lock(mu_);
    if (tasks_.size() >= kMaxEntries) tasks_.clear();
    tasks_.emplace(device, task);
    return task;
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  Mutex mu_;
  std::unordered_map<std::string, std::string, Hash, std::equal_to<>> tasks_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow::transport
