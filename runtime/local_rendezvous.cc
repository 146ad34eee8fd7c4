#include "runtime/local_rendezvous.h"

#include <vector>

#include "framework/rendezvous_delivery.h"

namespace dflow {

LocalRendezvous::~LocalRendezvous() { Abort(Cancelled("the step's rendezvous was destroyed")); }

Status LocalRendezvous::Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) {
  DoneCallback done;
  RecvArgs recv;
  {
    MutexLock lock(mu_);
    if (!aborted_.ok()) return aborted_;
    auto [it, fresh] = items_.try_emplace(key);
    Item& item = it->second;
    if (item.has_tensor) {
      return FailedPrecondition("rendezvous key {} was sent twice: by Send '{}', then by '{}'",
                                key.ToString(), item.send_node, args.node);
    }
    if (item.waiting) {
      done = std::move(item.waiting);
      recv = item.recv;
      items_.erase(it);
    } else {
      item.has_tensor = true;
      item.tensor = tensor;
      item.send_node = args.node;
    }
  }
  if (done) DeliverToRecv(key, args.node, tensor, recv, done);
  return Status::OK();
}

void LocalRendezvous::RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) {
  // Callbacks run outside the lock: a callback may use the rendezvous again.
  Tensor tensor;
  std::string send_node;
  Status failed;
  {
    MutexLock lock(mu_);
    if (!aborted_.ok()) {
      failed = aborted_;
    } else {
      auto [it, fresh] = items_.try_emplace(key);
      Item& item = it->second;
      if (!item.has_tensor) {
        if (!item.waiting) {
          item.waiting = std::move(done);
          item.recv = args;
          return;
        }
        failed =
            FailedPrecondition("rendezvous key {} is received twice: by Recv '{}', then by '{}'",
                               key.ToString(), item.recv.node, args.node);
      } else {
        tensor = std::move(item.tensor);
        send_node = std::move(item.send_node);
        items_.erase(it);
      }
    }
  }
  if (!failed.ok()) {
    done(failed, Tensor());
    return;
  }
  DeliverToRecv(key, send_node, tensor, args, done);
}

void LocalRendezvous::CancelRecv(const RendezvousKey& key, const Status& why) {
  DoneCallback done;
  {
    MutexLock lock(mu_);
    auto it = items_.find(key);
    if (it == items_.end() || !it->second.waiting) return;
    done = std::move(it->second.waiting);
    items_.erase(it);
  }
  done(why.ok() ? Cancelled("receive of {} cancelled", key.ToString()) : why, Tensor());
}

void LocalRendezvous::Abort(const Status& status) {
  std::vector<DoneCallback> waiting;
  Status why;
  {
    MutexLock lock(mu_);
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
