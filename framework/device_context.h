// DeviceContext: what a device hands its kernels while they run (KernelContext::device_context).
// A CPU device has nothing to add; a CUDA device's context holds its streams and library
// handles, so a kernel enqueues work there and returns.
#pragma once

namespace dflow {

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
};

}  // namespace dflow
