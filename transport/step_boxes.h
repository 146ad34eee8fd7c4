// StepBoxes: a transport's open steps. Per step, its rendezvous table (framework/rendezvous_
// table.h: the tensors that came before their Recv and the Recvs waiting) and the keys this
// process sent to other tasks; and the steps that finished here, so that a tensor arriving late
// for one is dropped instead of waiting for a rendezvous that will never come.
//
// Not thread-safe: a transport calls it under its own lock and runs what the tables hand back
// outside it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framework/rendezvous_table.h"

namespace dflow::transport {

template <typename Arrival>
class StepBoxes {
 public:
  struct Box {
    RendezvousTable<Arrival> table;  // its abort status is the step's
    // Keys this process sent to other tasks in the step, with their Send node.
    std::unordered_map<RendezvousKey, std::string, RendezvousKeyHash> sent;

    // Notes a Send of `key` to another task: FailedPrecondition naming the key and both Sends
    // when it was sent before; the abort status once the step is aborted.
    Status NoteSent(const RendezvousKey& key, std::string_view send_node) {
      if (!table.aborted().ok()) return table.aborted();
      auto [it, fresh] = sent.try_emplace(key, send_node);
      if (!fresh) {
        return FailedPrecondition("rendezvous key {} was sent twice: by Send '{}', then by '{}'",
                                  key.ToString(), it->second, send_node);
      }
      return Status::OK();
    }
  };

  // The step's box, made when missing; null when the step finished here.
  std::shared_ptr<Box> Get(int64_t step) {
    auto it = boxes_.find(step);
    if (it != boxes_.end()) return it->second;
    if (finished_.count(step)) return nullptr;
    auto box = std::make_shared<Box>();
    boxes_.emplace(step, box);
    return box;
  }
  // The step's box when it is open; null otherwise (nothing made).
  std::shared_ptr<Box> Find(int64_t step) const {
    auto it = boxes_.find(step);
    return it == boxes_.end() ? nullptr : it->second;
  }
  // The step is over here: its box (null when it had none) is handed back for the caller to
  // abort, and what arrives for it from now on is dropped.
  std::shared_ptr<Box> Finish(int64_t step) {
    std::shared_ptr<Box> box;
    if (auto it = boxes_.find(step); it != boxes_.end()) {
      box = std::move(it->second);
      boxes_.erase(it);
    }
    if (finished_.insert(step).second) {
      finished_order_.push_back(step);
      if (finished_order_.size() > kFinishedStepsKept) {
        finished_.erase(finished_order_.front());
        finished_order_.pop_front();
      }
    }
    return box;
  }
  std::vector<int64_t> open_steps() const {
    std::vector<int64_t> out;
    for (const auto& [step, box] : boxes_) out.push_back(step);
    return out;
  }
  // The open steps in which a Recv waits for a tensor from `task` (a peer lost: only those
  // steps fail at once; a later Recv from it fails as it comes, a Send to it as it goes).
  std::vector<int64_t> StepsWaitingFor(const std::string& task) const {
    std::vector<int64_t> out;
    for (const auto& [step, box] : boxes_) {
      if (box->table.AnyWaiting([&](const RendezvousKey& key) { return FromTask(key, task); })) {
        out.push_back(step);
      }
    }
    return out;
  }
  // Whether `key`'s tensor comes from `task`.
  static bool FromTask(const RendezvousKey& key, const std::string& task) {
    return key.src_device.size() > task.size() &&
           key.src_device.compare(0, task.size(), task) == 0 && key.src_device[task.size()] == '/';
  }

 private:
  static constexpr size_t kFinishedStepsKept = 4096;
  std::unordered_map<int64_t, std::shared_ptr<Box>> boxes_;
  std::unordered_set<int64_t> finished_;
  std::deque<int64_t> finished_order_;
};

}  // namespace dflow::transport
