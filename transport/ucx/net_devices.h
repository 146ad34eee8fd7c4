// Which network devices UCX may use, so that a worker listens only where it was asked: UCX's TCP
// transport otherwise opens a listening socket on every interface of the host (measured: a
// worker told 127.0.0.1:0 also listened on eth0's address).
#pragma once

#include <string>
#include <vector>

#include "graph/status.h"

namespace dflow::transport::internal {

// UCX_NET_DEVICES for a process listening at `listen_address` ("HOST:PORT"): the interface that
// holds that address ("lo" for 127.0.0.1), plus this host's RDMA ports ("mlx5_0:1", from
// /sys/class/infiniband), which listen on no IP address. "" (no limit) for a wildcard address
// (0.0.0.0 or ::, every interface asked for), no listener, or an address no interface of this
// host holds (the listener then fails with its own error). InvalidArgument for an address that
// does not parse.
Result<std::string> NetDevicesFor(const std::string& listen_address);

// For a process without a listener that will connect to `peers` ("HOST:PORT" each): the
// interfaces its routes to them leave by, plus the RDMA ports; "" (no limit) when `peers` is
// empty or one of them does not resolve (the connection then fails with its own error).
std::string NetDevicesToward(const std::vector<std::string>& peers);

}  // namespace dflow::transport::internal
