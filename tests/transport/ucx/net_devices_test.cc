// A process listens only where it was asked: internal::NetDevicesFor picks the interface of the
// listen address for UCX, and a UcxTransport listening on 127.0.0.1 has no listening socket of
// this process on any other address (the test lists every one, from /proc). Before, UCX's TCP
// transport listened on every interface (eth0's address beside loopback).
#include "transport/ucx/net_devices.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "transport/ucx/ucx_transport.h"

namespace dflow::transport {
namespace {

// "ADDRESS:PORT" of every TCP socket of this process in the LISTEN state.
std::vector<std::string> ListeningSockets() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (!error && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      const std::string hex = local.substr(0, local.find(':'));
      const int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      char text[INET6_ADDRSTRLEN] = "?";
      if (hex.size() == 8) {
        in_addr a{static_cast<in_addr_t>(std::stoul(hex, nullptr, 16))};
        inet_ntop(AF_INET, &a, text, sizeof(text));
      } else if (hex.size() == 32) {
        in6_addr a{};
        for (int w = 0; w < 4; ++w) {
          const uint32_t word =
              static_cast<uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
          std::memcpy(&a.s6_addr[4 * w], &word, 4);
        }
        inet_ntop(AF_INET6, &a, text, sizeof(text));
      }
      out.push_back(std::string(text) + ":" + std::to_string(port));
    }
  }
  return out;
}

TEST(NetDevicesTest, TheListenAddresssInterfaceOrNoLimit) {
  auto lo = internal::NetDevicesFor("127.0.0.1:0");
  ASSERT_TRUE(lo.ok()) << lo.status().ToString();
  EXPECT_EQ(lo->substr(0, lo->find(',')), "lo");
  EXPECT_EQ(internal::NetDevicesFor("0.0.0.0:7000").value(), "");  // every interface asked for
  EXPECT_EQ(internal::NetDevicesFor("[::]:7000").value(), "");
  EXPECT_EQ(internal::NetDevicesFor("").value(), "");                  // no listener
  EXPECT_EQ(internal::NetDevicesFor("192.0.2.254:7000").value(), "");  // not this host's
  EXPECT_EQ(internal::NetDevicesFor("no port").status().code(), StatusCode::kInvalidArgument);
}

TEST(NetDevicesTest, AClientUsesTheInterfacesTowardItsPeers) {
  const std::string lo = internal::NetDevicesToward({"127.0.0.1:7001", "localhost:7002"});
  EXPECT_EQ(lo.substr(0, lo.find(',')), "lo");
  EXPECT_EQ(internal::NetDevicesToward({}), "");
  EXPECT_EQ(internal::NetDevicesToward({"no-such-host.invalid:1"}), "");
}

// A master (no listener) that reaches only loopback peers: no socket of it listens elsewhere.
TEST(NetDevicesTest, AClientOfLoopbackPeersListensOnLoopbackOnly) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr) GTEST_SKIP() << "UCX_NET_DEVICES is set";
  UcxTransportOptions o;
  o.task = "/job:master/task:0";
  o.token = "net-devices-test";
  o.reach = {"127.0.0.1:7001"};
  auto t = UcxTransport::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (const std::string& s : ListeningSockets()) {
    EXPECT_EQ(s.rfind("127.0.0.1:", 0), 0u) << "a listening socket on " << s;
  }
}

TEST(NetDevicesTest, AWorkerOnLoopbackListensOnLoopbackOnly) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr) GTEST_SKIP() << "UCX_NET_DEVICES is set";
  UcxTransportOptions o;
  o.task = "/job:worker/task:0";
  o.token = "net-devices-test";
  o.listen_address = "127.0.0.1:0";
  auto t = UcxTransport::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<std::string> sockets = ListeningSockets();
  ASSERT_FALSE(sockets.empty());
  bool found_listener = false;
  for (const std::string& s : sockets) {
    EXPECT_EQ(s.rfind("127.0.0.1:", 0), 0u) << "a listening socket on " << s;
    found_listener |= s == (*t)->listen_address();
  }
  EXPECT_TRUE(found_listener) << (*t)->listen_address();
}

}  // namespace
}  // namespace dflow::transport
