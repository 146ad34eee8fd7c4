// LocalRendezvous: the in-process Rendezvous (framework/rendezvous.h). A Send stores the tensor (a
// reference: host buffers change hands without a copy) or hands it to a Recv already waiting;
// the matching is framework/rendezvous_table.h's. LocalRendezvousFactory makes one per step.
#pragma once

#include <unordered_map>

#include "framework/rendezvous.h"
#include "framework/rendezvous_table.h"
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
  Mutex mu_;
  RendezvousTable<Tensor> table_ DFLOW_GUARDED_BY(mu_);
};

class LocalRendezvousFactory final : public RendezvousFactory {
 public:
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override {
    return std::unique_ptr<Rendezvous>(std::make_unique<LocalRendezvous>());
  }
};

}  // namespace dflow
