// Kernels every device type shares. They never read or write tensor contents themselves: they
// pass references on (Identity, Reshape, Variable, a fed Placeholder), or copy through the
// device's context (framework/device_context.h) where the device's memory is its own (a Const's
// value in, a Send's tensor out to host memory, a Recv's tensor in). A device type registers
// them with one call and gets feeds, fetches, constants, variables and Send/Recv with the host
// and other devices.
#pragma once

#include <string>

#include "graph/status.h"

namespace dflow::common {

// Placeholder, Const, Identity, NoOp, Reshape, ReshapeLike, Variable, _Send and _Recv under
// `device_type`.
Status RegisterCommonKernels(const std::string& device_type);

// Those, Assign (a copy on the device into a fresh buffer, or the value's own buffer when the
// Assign is its last reader) and RandomUniform/RandomNormal computed in host memory
// (RegisterHostComputed), for a device type whose memory the host cannot read. The CPU's own
// Assign writes in place where that is safe.
Status RegisterDeviceMemoryKernels(const std::string& device_type);

// Registers `op` (which takes no inputs) under `device_type` as `host_type`'s kernel run in
// host memory, its outputs copied into the device's: an initializer's values are then the same
// on every device. A node of it with inputs is InvalidArgument when its plan is compiled.
Status RegisterHostComputed(const std::string& op, const std::string& device_type,
                            const std::string& host_type = "CPU");

}  // namespace dflow::common
