// The rendezvous a transport hands the runtime for one step (RendezvousFactory::Create). Tensors
// meet in the transport's per-step state, by the key's step, which is all a message from another
// task carries; this object remembers the steps of the keys it was given, so that its Abort fails
// them all (in every task) and its end releases them. Every transport makes its rendezvous this
// way; what differs is the StepHost behind it.
#pragma once

#include <cstdint>
#include <memory>

#include "framework/rendezvous.h"

namespace dflow::transport {

// What a transport does per step, for StepRendezvous.
class StepHost {
 public:
  virtual ~StepHost() = default;
  // The step is in use here (its state made when missing).
  virtual void AttachStep(int64_t step) = 0;
  // The step's rendezvous is gone: its state is dropped, and what still arrives for it too.
  virtual void ReleaseStep(int64_t step) = 0;
  // Fails the step here; `tell_peers`: and in every connected task.
  virtual void AbortStep(int64_t step, const Status& status, bool tell_peers) = 0;
  virtual Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) = 0;
  virtual void RecvAsync(const RendezvousKey& key, const RecvArgs& args,
                         Rendezvous::DoneCallback done) = 0;
  virtual void CancelRecv(const RendezvousKey& key, const Status& why) = 0;
  virtual bool TakesDeviceMemory(const RendezvousKey& key) = 0;
};

// The rendezvous of step `step` over `host`, which must outlive it.
std::unique_ptr<Rendezvous> MakeStepRendezvous(StepHost* host, int64_t step);

}  // namespace dflow::transport
