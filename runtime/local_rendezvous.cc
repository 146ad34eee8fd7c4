#include "runtime/local_rendezvous.h"

#include "framework/rendezvous_delivery.h"

namespace dflow {

LocalRendezvous::~LocalRendezvous() { Abort(Cancelled("the step's rendezvous was destroyed")); }

Status LocalRendezvous::Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) {
  std::optional<RendezvousTable<Tensor>::Waiting> waiting;
  {
    Tensor arrived = tensor;
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(waiting, table_.Arrive(key, args.node, arrived));
  }
  // Callbacks run outside the lock: a callback may use the rendezvous again.
  if (waiting) DeliverToRecv(key, args.node, tensor, waiting->args, waiting->done);
  return Status::OK();
}

void LocalRendezvous::RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) {
  auto arrived = [&]() DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return table_.Receive(key, args, done);
  }();
  if (!arrived.ok()) {
    done(arrived.status(), Tensor());
  } else if (*arrived) {
    DeliverToRecv(key, (*arrived)->send_node, (*arrived)->value, args, done);
  }
}

void LocalRendezvous::CancelRecv(const RendezvousKey& key, const Status& why) {
  std::optional<RendezvousTable<Tensor>::Waiting> waiting;
  {
    MutexLock lock(mu_);
    waiting = table_.Cancel(key);
  }
  if (waiting) {
    waiting->done(why.ok() ? Cancelled("receive of {} cancelled", key.ToString()) : why, Tensor());
  }
}

void LocalRendezvous::Abort(const Status& status) {
  RendezvousTable<Tensor>::Drained drained;
  Status why;
  {
    MutexLock lock(mu_);
    drained = table_.Abort(status);
    why = table_.aborted();
  }
  for (auto& done : drained.waiting) done(why, Tensor());
}

}  // namespace dflow
