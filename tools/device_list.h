// The devices the tools give a session: those of this process, of every registered device type
// (framework/device_factory.h). A list is canonical ("cpu:0", "cpu:1", "gpu:0", ...), CPU first
// and ordered by index (cpu:2 before cpu:10), free of duplicates however its names were spelled
// ("cpu:1", "CPU:1" and "/job:localhost/task:0/device:CPU:1" are one device). CPU devices are
// made up (a thread pool each), so a session's are cpu:0 .. cpu:N-1; the others must exist.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"

namespace dflow::tools {

// The most devices a tool creates (each is a thread pool).
inline constexpr int kMaxDevices = 64;

// --devices: comma-separated names of devices of this process in any form DeviceName::Parse
// accepts, in any order; returns them canonical and sorted. InvalidArgument naming the flag, the
// text and the device for: an empty entry, a malformed name, a name that is not one device
// ("cpu"), a device of another process, one named twice, a CPU gap (cpu:0,cpu:2), a type with
// no device here (saying why) or an index past those there are, more than kMaxDevices.
Result<std::vector<std::string>> ParseDeviceList(std::string_view text);

// The default when --devices is not given: cpu:0 .. cpu:K, K the highest CPU index a node of
// `graph` requests (so a graph pinned to cpu:0 and cpu:3 runs on four devices, the nodes
// pinned to 3 on cpu:3), then every device of another type a node requests (gpu:0); {"cpu:0"}
// when no node requests an index. Requests of no single local device ("cpu", "/job:ps") add
// nothing; the session judges them. InvalidArgument naming the node for a malformed request,
// FailedPrecondition naming node and device for a CPU index of kMaxDevices or more.
Result<std::vector<std::string>> DevicesRequestedBy(const Graph& graph);

// "cpu:0,cpu:1" for messages.
std::string JoinDevices(const std::vector<std::string>& devices);

}  // namespace dflow::tools
