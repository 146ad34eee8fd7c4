#include "framework/device_context.h"

#include <cstring>

namespace dflow {

Status DeviceContext::CopyOnDevice(const Tensor& src, Tensor& dst) {
  if (src.num_bytes() != dst.num_bytes()) {
    return InvalidArgument("copy of {} bytes into a tensor of {} bytes", src.num_bytes(),
                           dst.num_bytes());
  }
  if (src.num_bytes() > 0 && src.raw_data() != dst.raw_data()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.num_bytes());
  }
  return Status::OK();
}

Result<Tensor> DeviceContext::CopyFromDevice(const Tensor& sent) {
  if (sent.host_accessible()) return CopyFromHost(sent);
  return Unimplemented("no copy from {} memory into this device's memory", sent.device());
}

DeviceContext& HostMemoryContext() {
  static DeviceContext* host = new DeviceContext;
  return *host;
}

}  // namespace dflow
