// LocalRendezvous: the in-process Rendezvous (framework/rendezvous.h). A Send stores the tensor (a
// reference: host buffers change hands without a copy) or hands it to a Recv already waiting.
// LocalRendezvousFactory makes one per step.
#pragma once

#include <unordered_map>

#include "framework/rendezvous.h"
#include "graph/mutex.h"

namespace dflow {

class LocalRendezvous final : public Rendezvous {
 public:
  // Fails every receive still waiting with Cancelled.
  ~LocalRendezvous() override;
  Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) override
      DFLOW_EXCLUDES(mu_);
  void RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) override
      DFLOW_EXCLUDES(mu_);
  void CancelRecv(const RendezvousKey& key, const Status& why) override DFLOW_EXCLUDES(mu_);
  void Abort(const Status& status) override DFLOW_EXCLUDES(mu_);
  bool TakesDeviceMemory(const RendezvousKey&) const override { return true; }

 private:
  struct Item {
    bool has_tensor = false;
    Tensor tensor;
    std::string send_node;
    DoneCallback waiting;  // set when a Recv came first
    RecvArgs recv;         // the waiting Recv's expectations
  };

  Mutex mu_;
  std::unordered_map<RendezvousKey, Item, RendezvousKeyHash> items_ DFLOW_GUARDED_BY(mu_);
  Status aborted_ DFLOW_GUARDED_BY(mu_);
};

class LocalRendezvousFactory final : public RendezvousFactory {
 public:
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override {
    return std::unique_ptr<Rendezvous>(std::make_unique<LocalRendezvous>());
  }
};

}  // namespace dflow
