#include "framework/device.h"

#include "framework/rendezvous_key.h"

namespace dflow {

Device::Device(DeviceName name, std::function<void()> on_thread_start)
    : name_(std::move(name)),
      canonical_(name_.ToString()),
      incarnation_(ProcessIncarnation()),
      step_threads_(fmt::format("dflow {}:{}", *name_.type, name_.index.value_or(0)),
                    std::move(on_thread_start)) {}

}  // namespace dflow
