// TransportOptions: what every transport (transport/transport.h) is made with, and the checks
// and logging every implementation applies to them alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace dflow::transport {

inline constexpr size_t kMaxTokenBytes = 1024;

struct TransportOptions {
  // This process's task: "/job:worker/task:1". Empty: a worker that takes the name the first
  // connecting master assigns it.
  std::string task;
  // The cluster token: peers must present the same bytes (at most kMaxTokenBytes).
  std::string token;
  // Listen for peers at this address (for UCX "host:port"; port 0 picks a free one); empty: no
  // listener.
  std::string listen_address;
  // Without a listener: the addresses this process will connect to. It then uses only the
  // network interfaces toward them (UCX's TCP transport otherwise listens on every interface,
  // for a client too). Empty: no limit.
  std::vector<std::string> reach;
  // How long Connect waits for the peer's answer.
  std::chrono::milliseconds connect_timeout{10'000};
  // A connected peer that sends nothing for this long is lost (Unavailable naming it). A
  // connection to the listener that has not finished the handshake within connect_timeout is
  // closed, and the state of a peer gone is freed after this long.
  std::chrono::milliseconds peer_timeout{1'500};
  // Whether this process may read or map the memory of peers of its host, and offer its own to
  // them (UCX: tensors by reference, only with a peer whose memory a probe proved readable: one
  // of this host and user); false: never, in either direction (dflow-worker --no-cross-memory).
  bool cross_memory = true;
  // The most connections the listener holds before their handshake is done; more are refused at
  // once (a flood of connections cannot exhaust the process).
  int max_handshaking = 1024;
  // Told one line for each event a person should see (a refused or lost peer, a message dropped
  // as malformed); null: stderr.
  std::function<void(std::string_view)> log;
};

// InvalidArgument, naming the field, unless `options` can make a transport: a task of the form
// /job:NAME/task:N (or none), a token of at most kMaxTokenBytes, a positive connect_timeout.
Status CheckTransportOptions(const TransportOptions& options);

// Tells `line` to options.log, or else writes it to stderr with the task it comes from
// ("unnamed" while `task` is empty).
void LogTransportLine(const TransportOptions& options, const std::string& task,
                      std::string_view line);

}  // namespace dflow::transport
