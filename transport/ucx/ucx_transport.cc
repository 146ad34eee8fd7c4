#include "transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "graph/device_name.h"
#include "transport/ucx/hmac.h"
#include "transport/ucx/net_devices.h"
#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

namespace internal {

Status UcxError(std::string_view what, ucs_status_t status) {
  return Unavailable("{}: {}", what, ucs_status_string(status));
}

// Why nothing can listen on `addr` (`text`), found with a plain socket before UCX tries: UCX
// logs its own bind error and then reports only "Device is busy". OK for port 0 (any free port)
// and whenever the bind works (the socket is closed again at once).
Status CheckListenable(const SocketAddress& addr, const std::string& text) {
  uint16_t port = 0;
  if (addr.storage.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_port);
  } else if (addr.storage.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr.storage)->sin6_port);
  }
  if (port == 0) return Status::OK();
  int fd = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::OK();  // let UCX say what is wrong
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as UCX's listener does
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
  const int error = errno;
  ::close(fd);
  if (bound == 0) return Status::OK();
  switch (error) {
    case EADDRINUSE:
      return Unavailable(
          "cannot listen on {}: the address is in use (another process listens on port {}; "
          "choose another port, or port 0 for a free one)",
          text, port);
    case EADDRNOTAVAIL:
      return Unavailable("cannot listen on {}: the host is not an address of this machine", text);
    case EACCES:
      return PermissionDenied("cannot listen on {}: port {} needs privileges ({})", text, port,
                              std::strerror(error));
    default:
      return Unavailable("cannot listen on {}: {}", text, std::strerror(error));
  }
}

Result<SocketAddress> ParseAddress(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return InvalidArgument("address '{}' is not HOST:PORT", address);
  }
  std::string host(address.substr(0, colon));
  std::string port(address.substr(colon + 1));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  for (char c : port) {
    if (c < '0' || c > '9') return InvalidArgument("address '{}': port is not a number", address);
  }
  if (port.size() > 5 || std::stoi(port) > 65535) {
    return InvalidArgument("address '{}': port over 65535", address);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return InvalidArgument("address '{}': cannot resolve '{}': {}", address, host,
                           gai_strerror(rc));
  }
  SocketAddress out;
  std::memcpy(&out.storage, found->ai_addr, found->ai_addrlen);
  out.length = found->ai_addrlen;
  freeaddrinfo(found);
  return out;
}

std::string FormatAddress(const sockaddr_storage& s) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (s.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&s);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  if (s.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&s);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  return "?";
}

bool SameToken(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace internal

using namespace internal;

namespace {

// What two processes share exactly when they can share memory: the boot, and the network and
// IPC namespaces (namespaces stand in for hosts in the tests). Empty when unknown.
std::string HostIdentity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  if (boot.empty()) return "";
  std::string out = boot;
  for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/ipc"}) {
    char link[128];
    ssize_t n = readlink(ns, link, sizeof(link));
    if (n <= 0) return "";
    out += " " + std::string(link, static_cast<size_t>(n));
  }
  return out;
}

// UCX_MM_ERROR_HANDLING as the environment sets it (unset: `fallback`).
bool MmErrorHandling(bool fallback) {
  const char* v = std::getenv("UCX_MM_ERROR_HANDLING");
  if (v == nullptr) return fallback;
  for (const char* yes : {"y", "yes", "on", "1", "true"}) {
    if (strcasecmp(v, yes) == 0) return true;
  }
  return false;
}
}  // namespace

// --- start and stop ---------------------------------------------------------------------------

Status UcxEngine::Start() {
  if (const char* v = std::getenv("DFLOW_BY_REFERENCE_BYTES")) {
    char* end = nullptr;
    errno = 0;
    unsigned long long bytes = std::strtoull(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || *v == '-') {
      return InvalidArgument("DFLOW_BY_REFERENCE_BYTES='{}' is not a number of bytes", v);
    }
    options_.by_reference_bytes = static_cast<size_t>(bytes);
  }
  if (!options_.cross_memory) options_.by_reference_bytes = 0;  // over the environment too
  std::random_device random;
  probe_value_ = (uint64_t{random()} << 32 | random()) | 1;  // never 0, unlike unread memory
  {
    MutexLock lock(releaser_->mu);
    releaser_->impl = this;
  }
  if (options_.by_reference_bytes > 0) MakeProbe();
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("reading the UCX configuration", s);
  // Shared memory between processes of this host: UCX 1.13's sysv/posix transports serve
  // endpoints in peer error mode only when told to (without it such endpoints fall back to TCP
  // over loopback). A peer that dies behind them is caught by the heartbeats. The user's own
  // UCX_MM_ERROR_HANDLING wins.
  if (options_.shared_memory && std::getenv("UCX_MM_ERROR_HANDLING") == nullptr) {
    s = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcxError("enabling shared memory (UCX_MM_ERROR_HANDLING)", s);
    }
  }
  // A process restarted at the address of one that died (a worker brought back to recover a
  // training run) can listen at once: the dead one's connections linger in TIME_WAIT for a
  // minute, which without SO_REUSEADDR fails the bind ("Address already in use"). Two live
  // listeners on one port still cannot be. The user's own UCX_CM_REUSEADDR wins.
  if (std::getenv("UCX_CM_REUSEADDR") == nullptr &&
      std::getenv("UCX_TCP_CM_REUSEADDR") == nullptr) {
    s = ucp_config_modify(config, "CM_REUSEADDR", "y");
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcxError("allowing a listening address to be reused (UCX_CM_REUSEADDR)", s);
    }
  }
  // Tensors up to 1 MB go eagerly when shared memory is on: over shared memory UCX's rendezvous
  // costs three messages between the two progress threads before the data moves, and a ring
  // all-reduce's 128 KiB pieces between two workers took twice as long that way (334 against
  // 166 us an all-reduce of 256 KiB). The user's own UCX_RNDV_THRESH wins.
  if (options_.shared_memory && std::getenv("UCX_RNDV_THRESH") == nullptr) {
    s = ucp_config_modify(config, "RNDV_THRESH", "1MB");
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcxError("setting the eager limit (UCX_RNDV_THRESH)", s);
    }
  }
  // Listen only where asked: UCX's TCP transport opens a listening socket on each network
  // device it may use, so it may use only the one of the listen address (and RDMA ports), or,
  // without a listener, those toward the peers in options_.reach. The user's own
  // UCX_NET_DEVICES wins.
  if (std::getenv("UCX_NET_DEVICES") == nullptr) {
    // A client: the interfaces toward the peers it will reach.
    auto devices = options_.listen_address.empty()
                       ? Result<std::string>(NetDevicesToward(options_.reach))
                       : NetDevicesFor(options_.listen_address);
    if (devices.ok() && !devices->empty())
      s = ucp_config_modify(config, "NET_DEVICES", devices->c_str());
    if (!devices.ok() || s != UCS_OK) {
      ucp_config_release(config);
      return devices.ok() ? UcxError("choosing the network devices (UCX_NET_DEVICES)", s)
                          : devices.status();
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("starting UCX", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time calls the worker, the progress thread or a polling step thread, under
  // progress_mu_ (ucp_worker_signal is safe from any thread).
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) return UcxError("creating the UCX worker", s);
  s = ucp_worker_get_efd(worker_, &efd_);
  if (s != UCS_OK) return UcxError("getting the UCX worker's event fd", s);
  if (MmErrorHandling(options_.shared_memory)) {
    ucp_address_t* address = nullptr;
    size_t length = 0;
    s = ucp_worker_get_address(worker_, &address, &length);
    if (s != UCS_OK) return UcxError("getting the UCX worker's address", s);
    host_ = HostIdentity();
    // A larger address (many network devices) is not offered: peers use the first endpoint.
    if (!host_.empty() && length <= kMaxAddressBytes) {
      worker_address_.assign(reinterpret_cast<const char*>(address), length);
    } else {
      host_.clear();
    }
    ucp_worker_release_address(worker_, address);
  }

  struct Handler {
    MessageType type;
    ucp_am_recv_callback_t cb;
  };
  for (Handler h :
       {Handler{MessageType::kChallenge, &OnChallenge}, Handler{MessageType::kHello, &OnHello},
        Handler{MessageType::kHelloReply, &OnHelloReply}, Handler{MessageType::kTensor, &OnTensor},
        Handler{MessageType::kAbortStep, &OnAbortStep},
        Handler{MessageType::kCallRequest, &OnRequest},
        Handler{MessageType::kCallResponse, &OnResponse},
        Handler{MessageType::kHeartbeat, &OnHeartbeat}, Handler{MessageType::kGoodbye, &OnGoodbye},
        Handler{MessageType::kSameHost, &OnSameHost},
        Handler{MessageType::kTensorRef, &OnTensorRef},
        Handler{MessageType::kDeviceTensorRef, &OnDeviceTensorRef},
        Handler{MessageType::kTensorRefDone, &OnTensorRefDone},
        Handler{MessageType::kPeerReads, &OnPeerReads}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = static_cast<unsigned>(h.type);
    hp.cb = h.cb;
    hp.arg = this;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return UcxError("registering a UCX active message handler", s);
  }

  if (!options_.listen_address.empty()) {
    ASSIGN_OR_RETURN(SocketAddress addr, ParseAddress(options_.listen_address));
    RETURN_IF_ERROR(CheckListenable(addr, options_.listen_address));
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr.storage);
    lp.sockaddr.addrlen = addr.length;
    lp.conn_handler.cb = &OnConnRequest;
    lp.conn_handler.arg = this;
    s = ucp_listener_create(worker_, &lp, &listener_);
    if (s == UCS_ERR_BUSY) {
      // Taken between the check above and UCX's own bind.
      return Unavailable(
          "cannot listen on {}: the address is in use (choose another port, or "
          "port 0 for a free one)",
          options_.listen_address);
    }
    if (s != UCS_OK) {
      return UcxError(fmt::format("listening on {}", options_.listen_address), s);
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    s = ucp_listener_query(listener_, &attr);
    if (s != UCS_OK) return UcxError("querying the listener's address", s);
    bound_address_ = FormatAddress(attr.sockaddr);
  }
  thread_ = std::thread([this] { Loop(); });
  if (options_.polled_by_steps) {
    AddProgressEngine(this);
    polled_ = true;
  }
  return Status::OK();
}

UcxEngine::~UcxEngine() {
  if (polled_) RemoveProgressEngine(this);  // no step thread polls it from here on
  {
    // Borrowed tensors that outlive this transport tell no one.
    MutexLock lock(releaser_->mu);
    releaser_->impl = nullptr;
  }
  {
    std::vector<int64_t> steps;
    {
      MutexLock lock(mu_);
      steps = boxes_.open_steps();
    }
    for (int64_t step : steps) {
      AbortStep(step, Cancelled("the transport of task {} is shutting down", task()), false);
    }
  }
  server_.Stop();
  if (thread_.joinable()) {
    Post([this] {
      ShutdownOnThread();
      stop_.store(true);
    });
    thread_.join();
  } else {
    ShutdownOnThread();
  }
  mappings_.Clear();
  RetireHeld();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (probe_fd_ >= 0) close(probe_fd_);
}

void UcxEngine::ShutdownOnThread() {
  if (worker_ == nullptr) return;
  RunDeferred();
  // Goodbye to every ready peer first, so that they report a task that left, not a lost one.
  // Each answers with its own Goodbye once it has taken ours in, and only then are the
  // endpoints closed (a close seen first would read as a loss). Bounded: a peer that does not
  // answer in 300 ms learns it from the closed endpoint.
  std::vector<Peer*> ready;
  {
    MutexLock lock(mu_);
    for (auto& p : all_peers_) {
      if (p->state != Peer::State::kReady || p->ep == nullptr) continue;
      p->said_goodbye = true;
      ready.push_back(p.get());
    }
  }
  const std::string goodbye = EncodeGoodbye();
  for (Peer* p : ready) SendControl(p, MessageType::kGoodbye, goodbye);
  const auto said = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  auto answered = [&] {
    MutexLock lock(mu_);
    return std::all_of(ready.begin(), ready.end(), [](Peer* p) { return p->left; });
  };
  while (std::chrono::steady_clock::now() < said && !answered()) ucp_worker_progress(worker_);
  std::vector<void*> closing;
  std::vector<Peer*> peers;
  {
    MutexLock lock(mu_);
    for (auto& p : all_peers_) {
      if (p->ep != nullptr) peers.push_back(p.get());
      p->state = Peer::State::kClosed;
    }
    peer_of_task_.clear();
    peer_of_ep_.clear();
  }
  for (Peer* p : peers) {
    for (ucp_ep_h* ep : {&p->ep, &p->first_ep}) {
      if (*ep == nullptr) continue;
      if (void* r = CloseUcpEndpoint(*ep)) closing.push_back(r);
      *ep = nullptr;
    }
  }
  // Bounded: a close that does not finish in a second is left to ucp_worker_destroy.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!closing.empty() && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(worker_);
    std::erase_if(closing, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }
  if (listener_ != nullptr) {
    ucp_listener_destroy(listener_);
    listener_ = nullptr;
  }
  calls_.FailTask("", Cancelled("the transport of task {} is shutting down", task()));
}

// --- peers ------------------------------------------------------------------------------------

std::vector<std::string> UcxEngine::peers() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (auto& [task, peer] : peer_of_task_) out.push_back(task);
  std::sort(out.begin(), out.end());
  return out;
}

UcxEngine::Peer* UcxEngine::PeerOf(const ucp_am_recv_param_t* param, bool activity) {
  const auto now = std::chrono::steady_clock::now();
  if (activity) last_work_ = now;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || param->reply_ep == nullptr) {
    return nullptr;
  }
  MutexLock lock(mu_);
  auto it = peer_of_ep_.find(param->reply_ep);
  if (it == peer_of_ep_.end()) return nullptr;
  it->second->last_heard = now;  // every message says "alive"
  return it->second;
}

ucs_status_t UcxEngine::OnHeartbeat(void* arg, const void* header, size_t header_length, void*,
                                    size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param, false);
  if (peer == nullptr) return UCS_OK;  // from an endpoint already closed: nothing to tell
  Status s = DecodeHeartbeat({static_cast<const char*>(header), header_length});
  if (!s.ok()) return self->Drop(s.message());
  return UCS_OK;
}

void UcxEngine::CheckPeers() {
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = options_.peer_timeout;
  next_check_ = now + timeout / 6;
  // A tensor being pulled delays what its sender sends after it.
  const auto limit = timeout + std::chrono::milliseconds(pulling_bytes_ / 50'000);
  std::vector<Peer*> ready, silent;
  std::vector<std::string> late;  // connections closed for want of a handshake
  {
    MutexLock lock(mu_);
    for (auto& p : all_peers_) {
      if (!p->outgoing && p->state == Peer::State::kConnecting &&
          now - p->since > options_.connect_timeout) {
        p->state = Peer::State::kFailed;
        p->failure = Unavailable("no handshake within {} ms", options_.connect_timeout.count());
        stats_.handshakes_timed_out++;
        late.push_back(p->address);
        Peer* peer = p.get();
        deferred_.push_back([this, peer] { CloseEndpoint(peer); });
        continue;
      }
      if (p->state != Peer::State::kReady || p->ep == nullptr) continue;
      (now - p->last_heard > limit ? silent : ready).push_back(p.get());
    }
    // A peer is freed once it has failed or left, its endpoints have been closed for a peer
    // timeout, and nothing holds it (Peer::sends and holds; the maps by endpoint and task
    // forgot it when it failed, and its pending calls and held tensors went then too).
    std::erase_if(all_peers_, [&](const std::unique_ptr<Peer>& p) DFLOW_REQUIRES(mu_) {
      // A listener's peer that never finished its handshake, or any that failed or left.
      const bool gone = (!p->outgoing && !p->was_ready) || p->state == Peer::State::kFailed ||
                        p->state == Peer::State::kClosed;
      if (!gone || p->ep != nullptr || p->first_ep != nullptr || !p->closed_at ||
          now - *p->closed_at <= timeout || p->sends.load() != 0 || p->holds.load() != 0) {
        return false;
      }
      auto task = peer_of_task_.find(p->task);
      if (task != peer_of_task_.end() && task->second == p.get()) return false;
      for (const auto& [ep, peer] : peer_of_ep_) {
        if (peer == p.get()) return false;
      }
      return true;
    });
  }
  for (const std::string& from : late) {
    Log(fmt::format("closed the connection from {}: no handshake within {} ms", from,
                    options_.connect_timeout.count()));
  }
  const std::string beat = EncodeHeartbeat();
  for (Peer* p : ready) SendControl(p, MessageType::kHeartbeat, beat);
  for (Peer* p : silent) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - p->last_heard).count();
    PeerFailed(p, UCS_ERR_ENDPOINT_TIMEOUT,
               fmt::format("nothing heard from it for {} ms (its process hangs, or the link is "
                           "down)",
                           ms));
  }
}

UcxEngine::Peer* UcxEngine::ReadyPeer(const std::string& task) {
  auto it = peer_of_task_.find(task);
  if (it == peer_of_task_.end() || it->second->state != Peer::State::kReady) return nullptr;
  return it->second;
}

void UcxEngine::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  peer->impl->PeerFailed(peer, status);
}

ucs_status_t UcxEngine::OnGoodbye(void* arg, const void* header, size_t header_length, void*,
                                  size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param, false);
  if (peer == nullptr) return UCS_OK;  // from an endpoint already closed: nothing to tell
  Status s = DecodeGoodbye({static_cast<const char*>(header), header_length});
  if (!s.ok()) return self->Drop(s.message());
  bool answer = false;
  {
    MutexLock lock(self->mu_);
    peer->left = true;
    answer = !peer->said_goodbye;  // the answer to a Goodbye is one, but no more
    peer->said_goodbye = true;
  }
  // Not from inside the callback: failing a peer closes its endpoints.
  self->deferred_.push_back([self, peer, answer] {
    if (answer) self->SendControl(peer, MessageType::kGoodbye, EncodeGoodbye());
    self->PeerFailed(peer, UCS_OK, "", true);
  });
  return UCS_OK;
}

void UcxEngine::PeerFailed(Peer* peer, ucs_status_t status, std::string_view reason, bool left) {
  Status why;
  std::vector<int64_t> steps;
  bool was_ready = false;
  {
    MutexLock lock(mu_);
    if (peer->state == Peer::State::kClosed || peer->state == Peer::State::kFailed) {
      ForgetEndpoints(peer);
      deferred_.push_back([this, peer] { CloseEndpoint(peer); });
      return;
    }
    was_ready = peer->state == Peer::State::kReady;
    left = left || peer->left;
    std::string_view words = reason.empty() ? ucs_status_string(status) : reason;
    why = !was_ready ? Unavailable("cannot connect to {}: {}", peer->address, words)
          : left     ? Unavailable(
                           "task {} at {} left (it said goodbye: its process stopped or "
                               "closed its transport)",
                           peer->task, peer->address)
                 : Unavailable("lost the connection to task {} at {}: {}", peer->task,
                               peer->address, words);
    peer->state = Peer::State::kFailed;
    peer->failure = why;
    DropHeld(peer);
    auto it = peer_of_task_.find(peer->task);
    if (it != peer_of_task_.end() && it->second == peer) peer_of_task_.erase(it);
    peers_changed_.NotifyAll();
    if (was_ready) steps = boxes_.StepsWaitingFor(peer->task);
  }
  if (!why.ok() && was_ready) Log(why.message());
  calls_.FailPeer(peer, why);
  // The steps waiting for a tensor from this peer fail, here and in the other tasks; the rest
  // go on (another master's, say), and a later Recv from it or Send to it fails as it comes.
  for (int64_t step : steps) AbortStep(step, why, true);
  deferred_.push_back([this, peer] { CloseEndpoint(peer); });
}

void UcxEngine::ForgetEndpoints(Peer* peer) {
  ForgetEndpoint(peer, peer->ep);
  ForgetEndpoint(peer, peer->first_ep);
  for (ucp_ep_h ep : peer->incoming) ForgetEndpoint(peer, ep);
  peer->incoming.clear();
}

void UcxEngine::ForgetEndpoint(Peer* peer, ucp_ep_h ep) {
  auto it = peer_of_ep_.find(ep);
  if (it != peer_of_ep_.end() && it->second == peer) peer_of_ep_.erase(it);
}

void UcxEngine::CloseEndpoint(Peer* peer) {
  if (peer->ep == nullptr) return;
  {
    MutexLock lock(mu_);
    ForgetEndpoints(peer);
    peer->closed_at = std::chrono::steady_clock::now();
  }
  for (ucp_ep_h* ep : {&peer->ep, &peer->first_ep}) {
    if (*ep == nullptr) continue;
    // Freed at once; the worker finishes the close during progress.
    if (void* r = CloseUcpEndpoint(*ep)) ucp_request_free(r);
    *ep = nullptr;
  }
}

void* UcxEngine::CloseUcpEndpoint(ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* r = ucp_ep_close_nbx(ep, &param);
  return r != nullptr && !UCS_PTR_IS_ERR(r) ? r : nullptr;
}

// --- the public face --------------------------------------------------------------------------

Result<std::unique_ptr<UcxTransport>> UcxTransport::Create(UcxTransportOptions options) {
  RETURN_IF_ERROR(CheckTransportOptions(options));
  auto impl = std::make_unique<UcxEngine>(std::move(options));
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<UcxEngine> engine) : impl_(std::move(engine)) {}
UcxTransport::~UcxTransport() = default;

std::string UcxTransport::task() const { return impl_->task(); }
uint64_t UcxTransport::incarnation() const { return impl_->incarnation(); }
std::string UcxTransport::listen_address() const { return impl_->listen_address(); }
Result<std::string> UcxTransport::Connect(const std::string& address, const std::string& assign) {
  return impl_->Connect(address, assign);
}
void UcxTransport::SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods) {
  impl_->SetCallHandler(std::move(handler), std::move(quick_methods));
}
void UcxTransport::CallAsync(const std::string& task, uint16_t method, std::string payload,
                             std::chrono::milliseconds timeout, Reply done) {
  impl_->CallAsync(task, method, std::move(payload), timeout, std::move(done));
}
void UcxTransport::SetReplyLimit(uint16_t method, uint64_t bytes) {
  impl_->calls().SetReplyLimit(method, bytes);
}
std::vector<std::string> UcxTransport::peers() const { return impl_->peers(); }
TransportStats UcxTransport::stats() const { return impl_->stats(); }
Result<std::unique_ptr<Rendezvous>> UcxTransport::Create(int64_t step_id) {
  return MakeStepRendezvous(impl_.get(), step_id);
}

Status RegisterUcxTransport(TransportRegistry& registry) {
  return registry.Register(
      "ucx",
      [](TransportOptions options) -> Result<std::unique_ptr<Transport>> {
        UcxTransportOptions ucx;
        static_cast<TransportOptions&>(ucx) = std::move(options);
        ASSIGN_OR_RETURN(auto transport, UcxTransport::Create(std::move(ucx)));
        return std::unique_ptr<Transport>(std::move(transport));
      },
      "127.0.0.1:0");
}

}  // namespace dflow::transport
