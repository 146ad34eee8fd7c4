#include "transport/ucx/net_devices.h"

#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "transport/ucx/ucx_impl.h"

namespace dflow::transport::internal {
namespace {

bool SameIp(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b)->sin_addr, sizeof(in_addr)) == 0;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

bool Wildcard(const sockaddr_storage& s) {
  if (s.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&s)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (s.ss_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr);
  }
  return false;
}

// The interface holding `address` (an IP of this host); "" when none does.
std::string InterfaceOf(const sockaddr_storage& address) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string device;
  for (ifaddrs* i = all; i != nullptr && device.empty(); i = i->ifa_next) {
    if (SameIp(i->ifa_addr, address)) device = i->ifa_name;
  }
  freeifaddrs(all);
  return device;
}

// ",mlx5_0:1,..." for this host's RDMA ports, which carry no IP address of their own.
std::string RdmaPorts() {
  std::string out;
  std::error_code error;
  for (const auto& hca : std::filesystem::directory_iterator("/sys/class/infiniband", error)) {
    std::error_code port_error;
    for (const auto& port : std::filesystem::directory_iterator(hca.path() / "ports", port_error)) {
      out += fmt::format(",{}:{}", hca.path().filename().string(), port.path().filename().string());
    }
  }
  return out;
}

}  // namespace

std::string NetDevicesToward(const std::vector<std::string>& peers) {
  std::vector<std::string> devices;
  for (const std::string& peer : peers) {
    auto address = ParseAddress(peer);
    if (!address.ok()) return "";
    // A datagram socket's connect only picks the route and the local address.
    int fd = socket(address->storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "";
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    const bool routed =
        connect(fd, reinterpret_cast<const sockaddr*>(&address->storage), address->length) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    close(fd);
    if (!routed) return "";
    const std::string device = InterfaceOf(local);
    if (device.empty()) return "";
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) {
      devices.push_back(device);
    }
  }
  if (devices.empty()) return "";
  std::string out;
  for (const std::string& d : devices) out += (out.empty() ? "" : ",") + d;
  return out + RdmaPorts();
}

Result<std::string> NetDevicesFor(const std::string& listen_address) {
  if (listen_address.empty()) return std::string();
  ASSIGN_OR_RETURN(SocketAddress address, ParseAddress(listen_address));
  if (Wildcard(address.storage)) return std::string();
  std::string device = InterfaceOf(address.storage);
  // Not an address of this host: listening there fails, with its own error.
  if (device.empty()) return std::string();
  device += RdmaPorts();
  return device;
}

}  // namespace dflow::transport::internal
