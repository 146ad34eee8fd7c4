// RendezvousTable: the pending half of a rendezvous (framework/rendezvous.h). Per key it holds
// whichever came first: the tensor a Send left (with whatever the rendezvous keeps beside it,
// `Arrival`: the tensor itself in one process, or where its bytes wait in a transport), or the
// Recv waiting for it. Matching a Send with its Recv, refusing a key sent or received twice,
// cancelling one receive and aborting all of them are written here, once, for every rendezvous.
//
//   MutexLock lock(mu_);                                    // the owner's lock
//   Tensor arrived = tensor;
//   ASSIGN_OR_RETURN(auto waiting, table_.Arrive(key, args.node, arrived));
//   lock.Unlock();
//   if (waiting) DeliverToRecv(key, args.node, tensor, waiting->args, waiting->done);
//
// Not thread-safe: its owner calls it under a lock of its own and runs the callbacks it hands
// back outside that lock (a callback may use the rendezvous again).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/rendezvous.h"

namespace dflow {

template <typename Arrival>
class RendezvousTable {
 public:
  using DoneCallback = Rendezvous::DoneCallback;
  struct Waiting {
    RecvArgs args;
    DoneCallback done;
  };
  struct Arrived {
    std::string send_node;
    Arrival value;
  };
  // What Abort takes out: the receives to fail and the arrivals to let go.
  struct Drained {
    std::vector<DoneCallback> waiting;
    std::vector<Arrival> arrived;
  };

  // OK until the first Abort; its status after.
  const Status& aborted() const { return aborted_; }
  bool empty() const { return items_.empty(); }

  // The expectations of the Recv waiting for `key` (left waiting); null when none waits.
  const RecvArgs* WaitingFor(const RendezvousKey& key) const {
    auto it = items_.find(key);
    return it == items_.end() || !it->second.waiting ? nullptr : &it->second.recv;
  }

  // Whether a Recv waits for a key that `pred` holds for.
  template <typename Pred>
  bool AnyWaiting(const Pred& pred) const {
    for (const auto& [key, item] : items_) {
      if (item.waiting && pred(key)) return true;
    }
    return false;
  }

  // A tensor for `key` arrives from Send `send_node`: the Recv that waited for it, taken out
  // (deliver `value` to it; `value` is left alone), or nullopt when none waited and `value` is
  // kept (moved from) for the Recv to come. Errors, with `value` left alone: the abort status
  // once aborted; FailedPrecondition naming the key and both Sends when the key arrived already.
  Result<std::optional<Waiting>> Arrive(const RendezvousKey& key, std::string_view send_node,
                                        Arrival& value) {
    if (!aborted_.ok()) return aborted_;
    auto [it, fresh] = items_.try_emplace(key);
    Item& item = it->second;
    if (item.arrived) {
      return FailedPrecondition("rendezvous key {} was sent twice: by Send '{}', then by '{}'",
                                key.ToString(), item.send_node, send_node);
    }
    if (item.waiting) {
      Waiting w{std::move(item.recv), std::move(item.waiting)};
      items_.erase(it);
      return std::optional<Waiting>(std::move(w));
    }
    item.arrived = true;
    item.send_node = send_node;
    item.value = std::move(value);
    return std::optional<Waiting>();
  }

  // A Recv for `key` comes: what arrived for it, taken out (deliver it), or nullopt when nothing
  // has and the Recv now waits (`done` taken). Errors, with `done` left to the caller: the abort
  // status once aborted; FailedPrecondition naming the key and both Recvs when a Recv of the key
  // waits already.
  Result<std::optional<Arrived>> Receive(const RendezvousKey& key, const RecvArgs& args,
                                         DoneCallback& done) {
    if (!aborted_.ok()) return aborted_;
    auto [it, fresh] = items_.try_emplace(key);
    Item& item = it->second;
    if (item.waiting) {
      return FailedPrecondition("rendezvous key {} is received twice: by Recv '{}', then by '{}'",
                                key.ToString(), item.recv.node, args.node);
    }
    if (!item.arrived) {
      item.waiting = std::move(done);
      item.recv = args;
      return std::optional<Arrived>();
    }
    Arrived a{std::move(item.send_node), std::move(item.value)};
    items_.erase(it);
    return std::optional<Arrived>(std::move(a));
  }

  // The Recv waiting for `key`, taken out; nullopt when none waits.
  std::optional<Waiting> Cancel(const RendezvousKey& key) {
    auto it = items_.find(key);
    if (it == items_.end() || !it->second.waiting) return std::nullopt;
    Waiting w{std::move(it->second.recv), std::move(it->second.waiting)};
    items_.erase(it);
    return w;
  }

  // Fails the table with `status` (a Cancelled when OK): every later call returns it. Takes
  // out every waiting Recv and every arrival for the caller to fail and let go. The first abort
  // wins: later ones take out nothing.
  Drained Abort(const Status& status) {
    Drained out;
    if (!aborted_.ok()) return out;
    aborted_ = status.ok() ? Cancelled("rendezvous aborted") : status;
    for (auto& [key, item] : items_) {
      if (item.waiting) out.waiting.push_back(std::move(item.waiting));
      if (item.arrived) out.arrived.push_back(std::move(item.value));
    }
    items_.clear();
    return out;
  }

 private:
  struct Item {
    bool arrived = false;
    std::string send_node;
    Arrival value{};
    DoneCallback waiting;  // set when the Recv came first
    RecvArgs recv;         // its expectations
  };
  std::unordered_map<RendezvousKey, Item, RendezvousKeyHash> items_;
  Status aborted_;
};

}  // namespace dflow
