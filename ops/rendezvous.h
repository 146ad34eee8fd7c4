// Rendezvous: where a step's Send kernels leave tensors for the Recv kernels of other devices.
// Keys name the source device with its incarnation, the destination device, the tensor and the
// step (RendezvousKey). Send never blocks; RecvAsync calls back when the tensor is there.
// Abort(status) fails every pending and future Recv of the step with that status, so one
// failing device cannot leave the others waiting. Implementations: LocalRendezvous
// (runtime/local_rendezvous.h) hands tensors over inside one process without a copy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

class Node;

class Rendezvous {
 public:
  using DoneCallback = std::function<void(const Status&, const Tensor&)>;
  virtual ~Rendezvous() = default;
  // FailedPrecondition when the key was already sent in this step; the abort status after
  // Abort.
  virtual Status Send(const std::string& key, const Tensor& tensor) = 0;
  // Calls done exactly once: with the tensor, or with the abort status. May call it at once.
  virtual void RecvAsync(const std::string& key, DoneCallback done) = 0;
  virtual void Abort(const Status& status) = 0;
};

// "SRC;INCARNATION;DST;TENSOR;STEP".
std::string RendezvousKey(const std::string& src_device, int64_t incarnation,
                          const std::string& dst_device, const std::string& tensor, int64_t step);
// The key a _Send or _Recv node uses in step `step`, read from its attributes.
// REQUIRES: a validated _Send or _Recv node.
std::string RendezvousKeyOf(const Node& node, int64_t step);

// What a kernel knows of the step it runs in.
struct StepInfo {
  int64_t step_id = 0;
  Rendezvous* rendezvous = nullptr;  // null outside partitioned runs
};

}  // namespace dflow
