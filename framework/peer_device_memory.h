// PeerDeviceMemory: device memory of another process of this host, which this process reads by
// a handle that process exported (Allocator::ExportToPeer: CUDA IPC). A transport delivers a
// tensor over it to a Recv on a device that opens such handles (DeviceContext::CopyFromDevice:
// a GPU copies it into its own memory); the tensor has no address here (raw_data() is null) and
// is not host memory. When its last reference goes, `on_release` tells the exporting process
// that its memory is free.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "graph/allocator.h"

namespace dflow {

class PeerDeviceMemory final : public Allocator {
 public:
  // `device`: the exporting device's canonical name; `handle`: what it exported.
  PeerDeviceMemory(std::string device, std::string handle, std::function<void()> on_release)
      : device_(std::move(device)),
        handle_(std::move(handle)),
        on_release_(std::move(on_release)) {}

  const std::string& handle() const { return handle_; }

  void* Allocate(size_t, size_t) override { return nullptr; }
  void Deallocate(void*, size_t) override {
    if (on_release_) std::exchange(on_release_, nullptr)();
  }
  const std::string& device() const override { return device_; }
  bool host_accessible() const override { return false; }

 private:
  std::string device_;
  std::string handle_;
  std::function<void()> on_release_;
};

}  // namespace dflow
