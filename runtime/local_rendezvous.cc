#include "runtime/local_rendezvous.h"

#include <vector>

namespace dflow {

LocalRendezvous::~LocalRendezvous() { Abort(Cancelled("the step's rendezvous was destroyed")); }

Status LocalRendezvous::Send(const std::string& key, const Tensor& tensor) {
  DoneCallback done;
  {
    std::lock_guard lock(mu_);
    if (!aborted_.ok()) return aborted_;
    Item& item = items_[key];
    if (item.has_tensor) return FailedPrecondition("rendezvous key '{}' was sent twice", key);
    if (item.waiting) {
      done = std::move(item.waiting);
      items_.erase(key);
    } else {
      item.has_tensor = true;
      item.tensor = tensor;
    }
  }
  if (done) done(Status::OK(), tensor);
  return Status::OK();
}

void LocalRendezvous::RecvAsync(const std::string& key, DoneCallback done) {
  Tensor tensor;
  Status status;
  {
    std::lock_guard lock(mu_);
    status = aborted_;
    if (status.ok()) {
      auto it = items_.find(key);
      if (it == items_.end() || !it->second.has_tensor) {
        Item& item = items_[key];
        if (item.waiting) {
          status = FailedPrecondition("rendezvous key '{}' is received twice", key);
        } else {
          item.waiting = std::move(done);
          return;
        }
      } else {
        tensor = std::move(it->second.tensor);
        items_.erase(it);
      }
    }
  }
  done(status, tensor);
}

void LocalRendezvous::Abort(const Status& status) {
  std::vector<DoneCallback> waiting;
  Status why;
  {
    std::lock_guard lock(mu_);
    if (!aborted_.ok()) return;
    aborted_ = status.ok() ? Cancelled("rendezvous aborted") : status;
    why = aborted_;
    for (auto& [key, item] : items_) {
      if (item.waiting) waiting.push_back(std::move(item.waiting));
    }
    items_.clear();
  }
  for (auto& done : waiting) done(why, Tensor());
}

}  // namespace dflow
