// DeviceContext: what a device hands its kernels while they run (KernelContext::device_context).
// A CPU device has nothing to add (its context is null); a CUDA device's context holds its
// stream, so a kernel enqueues work there and returns.
//
// A device whose memory the host cannot read (a GPU) also moves values through its context:
// the kernels that every device type shares (ops/common/) copy a Const's value in, a Send's
// tensor out to host memory and a Recv's tensor in, without knowing the device. The defaults
// are those of host memory: the buffer is shared, no copy is made. Between two devices of one
// process a Send hands its device's SendView and the Recv copies it in (CopyFromDevice): two
// GPUs copy peer to peer, queued on their streams.
#pragma once

#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  // A host copy of `tensor`, which is in this device's memory. Waits for the work queued before
  // it on the device (the value must be complete): the host waits only here.
  virtual Result<Tensor> CopyToHost(const Tensor& tensor) { return tensor; }
  // A copy of host tensor `host` in this device's memory, queued after the device's work; the
  // caller may drop or change `host` once it returns.
  virtual Result<Tensor> CopyFromHost(const Tensor& host) { return host; }
  // Copies `src` into `dst`, both in this device's memory, of the same dtype and size; queued
  // in order with the device's kernels.
  virtual Status CopyOnDevice(const Tensor& src, Tensor& dst);

  // What a Send hands a Recv on another device of this process whose memory is its own: by
  // default a host copy (CopyToHost). A GPU hands its tensor with an event marking when its
  // value is complete, without waiting for it (ops/cuda/cuda_device.h).
  virtual Result<Tensor> SendView(const Tensor& tensor) { return CopyToHost(tensor); }
  // A copy in this device's memory of a received tensor: a host tensor (CopyFromHost) or what
  // another device's SendView gave. Unimplemented, naming both memories, for memory this device
  // cannot copy from.
  virtual Result<Tensor> CopyFromDevice(const Tensor& sent);
};

// The context of host memory (the defaults above), for kernels of a device whose context is
// null.
DeviceContext& HostMemoryContext();

}  // namespace dflow
