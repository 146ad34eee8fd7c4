// Rendezvous: where a step's _Send kernels leave tensors for the _Recv kernels of other devices,
// in this process or another. The contract every implementation keeps (and that
// tests/framework/rendezvous_conformance.h checks):
//
// - Send never blocks. It hands the tensor to a waiting Recv of the same key or keeps it until
//   one comes. A second Send of a key still held is FailedPrecondition naming the key and both
//   Send nodes.
// - RecvAsync calls `done` exactly once, from any thread, possibly before returning: with the
//   tensor, or with an error. It is told what the Recv node expects; a tensor of another dtype,
//   or a shape not compatible with the expected one, is InvalidArgument naming both nodes. The
//   tensor arrives in memory of the destination allocator (in one process, host memory is
//   shared without a copy). A second RecvAsync of a key still waiting is FailedPrecondition.
// - CancelRecv fails one waiting receive with `why`; nothing happens when none waits.
// - Abort(status) fails every waiting and later RecvAsync with that status, and later Sends
//   return it. The first Abort wins; later ones change nothing.
//
// A rendezvous serves the steps whose keys it is given; the runtime makes one per step through a
// RendezvousFactory, so a transport can keep per-step state and drop it when the step ends.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "framework/rendezvous_key.h"
#include "graph/allocator.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

class Node;

// What the sending side tells the rendezvous.
struct SendArgs {
  std::string_view node;  // the _Send node, for messages
};

// What the receiving side expects. Strings must outlive the receive.
struct RecvArgs {
  std::string_view node;  // the _Recv node, for messages
  DType dtype = DType::kInvalid;
  Shape shape = Shape::Unknown();  // may be partly known
  Allocator* allocator = nullptr;  // the destination device's memory
  // The Recv takes a tensor in another device's memory of this process and copies it itself
  // (DeviceContext::CopyFromDevice); otherwise it receives host memory only.
  bool accepts_device_memory = false;
};

class Rendezvous {
 public:
  using DoneCallback = std::function<void(const Status&, const Tensor&)>;
  virtual ~Rendezvous() = default;
  virtual Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) = 0;
  virtual void RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) = 0;
  virtual void CancelRecv(const RendezvousKey& key, const Status& why) = 0;
  virtual void Abort(const Status& status) = 0;
  // True when the Recv of `key` can take a tensor in device memory (DeviceContext::SendView)
  // rather than a host copy: it is in this process, or in another of this host that reads
  // device memory the sender exports (Allocator::ExportToPeer, CUDA IPC).
  virtual bool TakesDeviceMemory(const RendezvousKey& key) const { return false; }
};

// Makes the rendezvous of one step. Thread-safe: concurrent steps call it at once.
class RendezvousFactory {
 public:
  virtual ~RendezvousFactory() = default;
  virtual Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) = 0;
};

// The check every implementation applies to a tensor meeting its Recv: InvalidArgument naming
// the Recv node, the Send node, both dtypes and shapes, and the key.
Status CheckReceived(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
                     const RecvArgs& args);

// The key of a validated _Send or _Recv node for step `step_id`, from its attributes.
RendezvousKey RendezvousKeyOf(const Node& node, int64_t step_id);

// What a kernel knows of the step it runs in.
struct StepInfo {
  int64_t step_id = 0;
  Rendezvous* rendezvous = nullptr;  // null outside partitioned runs
};

}  // namespace dflow
