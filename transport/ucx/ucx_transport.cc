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

// kNonceBytes random bytes.
std::string RandomNonce() {
  static thread_local std::random_device random;
  std::string nonce(kNonceBytes, '\0');
  for (size_t i = 0; i < kNonceBytes; i += 4) {
    const uint32_t word = random();
    std::memcpy(&nonce[i], &word, 4);
  }
  return nonce;
}

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
  // device it may use, so it may use only the one of the listen address (and RDMA ports). The
  // user's own UCX_NET_DEVICES wins.
  if (std::getenv("UCX_NET_DEVICES") == nullptr) {
    auto devices = NetDevicesFor(options_.listen_address);
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
        Handler{MessageType::kHeartbeat, &OnHeartbeat},
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

void UcxEngine::OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<UcxEngine*>(arg);
  // Endpoints are made outside UCX's callbacks.
  self->deferred_.push_back([self, request] { self->Accept(request); });
}

void UcxEngine::Accept(ucp_conn_request_h request) {
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string from = "?";
  if (ucp_conn_request_query(request, &attr) == UCS_OK) from = FormatAddress(attr.client_address);
  Peer* peer;
  {
    MutexLock lock(mu_);
    all_peers_.push_back(std::make_unique<Peer>());
    peer = all_peers_.back().get();
    peer->impl = this;
    peer->address = from;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &OnEndpointError;
  ep.err_handler.arg = peer;
  ucp_ep_h handle = nullptr;
  ucs_status_t s = ucp_ep_create(worker_, &ep, &handle);
  MutexLock lock(mu_);
  if (s != UCS_OK) {
    peer->state = Peer::State::kFailed;
    peer->failure = UcxError(fmt::format("accepting a connection from {}", from), s);
    lock.Unlock();
    Log(peer->failure.message());
    return;
  }
  peer->ep = handle;
  // It challenges the peer, and waits for its Hello.
  peer->server_nonce = RandomNonce();
  peer_of_ep_[handle] = peer;
  auto challenge = Encode(Challenge{kProtocolVersion, peer->server_nonce});
  lock.Unlock();
  SendControl(peer, MessageType::kChallenge, std::move(challenge).value());
}

Result<std::string> UcxEngine::Connect(const std::string& address, const std::string& assign) {
  ASSIGN_OR_RETURN(SocketAddress addr, ParseAddress(address));
  if (!assign.empty() && !IsTaskName(assign)) {
    return InvalidArgument("cannot name the task at {} '{}': not /job:NAME/task:N", address,
                           assign);
  }
  if (task().empty()) {
    return FailedPrecondition("this process has no task name yet, so it cannot connect to {}",
                              address);
  }
  Peer* peer;
  {
    MutexLock lock(mu_);
    all_peers_.push_back(std::make_unique<Peer>());
    peer = all_peers_.back().get();
    peer->impl = this;
    peer->address = address;
    peer->outgoing = true;
    peer->assign = assign;
  }
  Post([this, peer, addr]() mutable {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr.storage);
    ep.sockaddr.addrlen = addr.length;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &OnEndpointError;
    ep.err_handler.arg = peer;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &peer->ep);
    if (s != UCS_OK) {
      peer->ep = nullptr;
      MutexLock lock(mu_);
      peer->state = Peer::State::kFailed;
      peer->failure = UcxError(fmt::format("connecting to {}", peer->address), s);
      peers_changed_.NotifyAll();
      return;
    }
    // It waits for the server's Challenge; a failure to reach the peer comes through
    // OnEndpointError.
    MutexLock lock(mu_);
    peer_of_ep_[peer->ep] = peer;
  });
  MutexLock lock(mu_);
  // A peer of this host is ready once it has said whether it reads this process's memory, so
  // that tensors go by reference from the first step on (without its word in time they go
  // through UCX until it comes).
  bool answered = peers_changed_.WaitFor(mu_, options_.connect_timeout, [&]() DFLOW_REQUIRES(mu_) {
    return peer->state != Peer::State::kConnecting &&
           !(peer->state == Peer::State::kReady && peer->awaiting_verdict);
  });
  if (!answered && peer->state == Peer::State::kReady) answered = true;
  if (answered && peer->state == Peer::State::kReady && !assign.empty() && peer->task != assign) {
    peer->state = Peer::State::kFailed;
    peer->failure =
        FailedPrecondition("{} answered as task {}, not {}", address, peer->task, assign);
  }
  if (!answered) {
    peer->state = Peer::State::kFailed;
    peer->failure =
        Unavailable("no answer from {} within {} ms", address, options_.connect_timeout.count());
    Post([this, peer] { CloseEndpoint(peer); });
    return peer->failure;
  }
  if (peer->state != Peer::State::kReady) return peer->failure;
  return peer->task;
}

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
  {
    MutexLock lock(mu_);
    for (auto& p : all_peers_) {
      if (p->state != Peer::State::kReady || p->ep == nullptr) continue;
      (now - p->last_heard > limit ? silent : ready).push_back(p.get());
    }
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

ucs_status_t UcxEngine::OnChallenge(void* arg, const void* header, size_t header_length, void*,
                                    size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  if (peer == nullptr || !peer->outgoing) {
    return self->Drop("a Challenge from an unknown endpoint");
  }
  auto challenge = DecodeChallenge({static_cast<const char*>(header), header_length});
  MutexLock lock(self->mu_);
  if (peer->state != Peer::State::kConnecting || !peer->server_nonce.empty()) return UCS_OK;
  Status bad;
  if (!challenge.ok()) {
    bad = Unavailable("{} answered with a bad Challenge: {}", peer->address,
                      challenge.status().message());
  } else if (challenge->version != kProtocolVersion) {
    bad = FailedPrecondition("the process at {} speaks protocol version {}, this process {}",
                             peer->address, challenge->version, kProtocolVersion);
  } else if (challenge->nonce.size() != kNonceBytes) {
    bad = Unavailable("{} answered with a Challenge of a {}-byte nonce", peer->address,
                      challenge->nonce.size());
  }
  if (!bad.ok()) {
    peer->state = Peer::State::kFailed;
    peer->failure = bad;
    self->deferred_.push_back([self, peer] { self->CloseEndpoint(peer); });
    self->peers_changed_.NotifyAll();
    return UCS_OK;
  }
  peer->server_nonce = challenge->nonce;
  peer->client_nonce = RandomNonce();
  // Not from inside the callback: UCX calls it during progress.
  self->deferred_.push_back([self, peer] { self->SendHello(peer); });
  return UCS_OK;
}

void UcxEngine::SendHello(Peer* peer) {
  Hello hello;
  hello.task = task();
  hello.incarnation = incarnation_;
  std::string server_nonce;
  {
    MutexLock lock(mu_);
    server_nonce = peer->server_nonce;
    hello.nonce = peer->client_nonce;
    hello.assign = peer->assign;
  }
  hello.proof = HandshakeProof(
      options_.token, "hello",
      {server_nonce, hello.nonce, hello.task, std::to_string(hello.incarnation), hello.assign});
  hello.host = host_;
  hello.address = worker_address_;
  auto encoded = Encode(hello);
  if (!encoded.ok() && !hello.host.empty()) {
    // Long names leave no room for the offer: the peer is reached by socket address only.
    hello.host.clear();
    hello.address.clear();
    encoded = Encode(hello);
  }
  if (!encoded.ok()) {
    MutexLock lock(mu_);
    peer->state = Peer::State::kFailed;
    peer->failure = encoded.status();
    deferred_.push_back([this, peer] { CloseEndpoint(peer); });
    peers_changed_.NotifyAll();
    return;
  }
  SendControl(peer, MessageType::kHello, std::move(encoded).value());
}

std::string UcxEngine::SameHostProof(const Peer* peer, const std::string& task,
                                     uint64_t incarnation) const {
  return HandshakeProof(
      options_.token, "same host",
      {peer->server_nonce, peer->client_nonce, task, std::to_string(incarnation)});
}

ucs_status_t UcxEngine::OnHello(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  if (peer == nullptr || peer->outgoing) return self->Drop("a Hello from an unknown endpoint");
  auto hello = DecodeHello({static_cast<const char*>(header), header_length});
  HelloReply reply;
  std::string me = self->task();
  std::string assign;
  reply.incarnation = self->incarnation_;
  if (!hello.ok()) {
    reply.reason = std::string(hello.status().message());
  } else if (hello->version != kProtocolVersion) {
    reply.reason = fmt::format("protocol version {}, but this process speaks version {}",
                               hello->version, kProtocolVersion);
  } else if (!SameToken(hello->proof,
                        HandshakeProof(self->options_.token, "hello",
                                       {peer->server_nonce, hello->nonce, hello->task,
                                        std::to_string(hello->incarnation), hello->assign}))) {
    reply.reason = fmt::format("wrong cluster token from task {}", hello->task);
  } else if (!IsTaskName(hello->task)) {
    reply.reason = fmt::format("'{}' is not a task name (/job:NAME/task:N)", hello->task);
  } else if (!hello->assign.empty() && !IsTaskName(hello->assign)) {
    reply.reason = fmt::format("cannot take the name '{}': not /job:NAME/task:N", hello->assign);
  } else if (!hello->assign.empty() && !me.empty() && hello->assign != me) {
    reply.reason = fmt::format("this process is task {}, not {}", me, hello->assign);
  } else if (hello->task == (me.empty() ? hello->assign : me)) {
    reply.reason = fmt::format("task {} connected to itself", hello->task);
  } else {
    reply.accepted = true;
    if (me.empty()) assign = hello->assign;
  }
  if (reply.accepted && !assign.empty()) {
    MutexLock lock(self->mu_);
    if (self->task_.empty()) self->task_ = assign;
    me = self->task_;
    lock.Unlock();
    self->Log(fmt::format("task {} named this process {}", hello->task, me));
  }
  reply.task = me;
  if (!reply.accepted) {
    self->Log(fmt::format("refused a connection from {}: {}", peer->address, reply.reason));
  } else if (self->SameHostOffer(hello->host, hello->address)) {
    // A peer of this host: offer back this worker's address (see OpenSameHost). An accepted
    // reply has room for it: it carries no reason.
    reply.host = self->host_;
    reply.address = self->worker_address_;
    peer->same_host_address = hello->address;
  }
  if (reply.accepted) {
    reply.proof = HandshakeProof(
        self->options_.token, "reply",
        {peer->server_nonce, hello->nonce, reply.task, std::to_string(reply.incarnation)});
  }
  auto encoded = Encode(reply);
  if (!encoded.ok()) return UCS_OK;
  {
    MutexLock lock(self->mu_);
    if (reply.accepted) {
      peer->client_nonce = hello->nonce;
      peer->task = hello->task;
      peer->incarnation = hello->incarnation;
      peer->state = Peer::State::kReady;
      // A restarted task replaces its previous connection.
      self->peer_of_task_[peer->task] = peer;
    } else {
      peer->state = Peer::State::kFailed;
      peer->failure = PermissionDenied("refused: {}", reply.reason);
    }
    self->peers_changed_.NotifyAll();
  }
  // Not from inside the callback: UCX calls it during progress.
  // The refused client closes the connection once it has read the reason.
  self->deferred_.push_back([self, peer, h = std::move(encoded).value()] {
    self->SendControl(peer, MessageType::kHelloReply, h);
  });
  return UCS_OK;
}

ucs_status_t UcxEngine::OnHelloReply(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  if (peer == nullptr || !peer->outgoing) {
    return self->Drop("a HelloReply from an unknown endpoint");
  }
  auto reply = DecodeHelloReply({static_cast<const char*>(header), header_length});
  MutexLock lock(self->mu_);
  if (peer->state != Peer::State::kConnecting) return UCS_OK;
  if (!reply.ok()) {
    peer->state = Peer::State::kFailed;
    peer->failure =
        Unavailable("{} answered with a bad reply: {}", peer->address, reply.status().message());
    self->deferred_.push_back([self, peer] { self->CloseEndpoint(peer); });
  } else if (!reply->accepted) {
    std::string why =
        fmt::format("task {} at {} refused the connection: {}",
                    reply->task.empty() ? "(unnamed)" : reply->task, peer->address, reply->reason);
    peer->state = Peer::State::kFailed;
    peer->failure = reply->reason.find("cluster token") != std::string::npos
                        ? PermissionDenied("{}", why)
                        : FailedPrecondition("{}", why);
    self->deferred_.push_back([self, peer] { self->CloseEndpoint(peer); });
  } else if (!IsTaskName(reply->task)) {
    peer->state = Peer::State::kFailed;
    peer->failure = FailedPrecondition(
        "the process at {} has no task name yet; connect with one to assign it", peer->address);
    self->deferred_.push_back([self, peer] { self->CloseEndpoint(peer); });
  } else if (!SameToken(reply->proof,
                        HandshakeProof(self->options_.token, "reply",
                                       {peer->server_nonce, peer->client_nonce, reply->task,
                                        std::to_string(reply->incarnation)}))) {
    peer->state = Peer::State::kFailed;
    peer->failure = PermissionDenied(
        "task {} at {} accepted the connection without proof that it knows the cluster token",
        reply->task, peer->address);
    self->deferred_.push_back([self, peer] { self->CloseEndpoint(peer); });
  } else {
    peer->state = Peer::State::kReady;
    peer->task = reply->task;
    peer->incarnation = reply->incarnation;
    self->peer_of_task_[peer->task] = peer;
    if (self->SameHostOffer(reply->host, reply->address)) {
      // Before the first message Connect's caller sends (it is posted after this runs).
      peer->same_host_address = reply->address;
      peer->awaiting_verdict = self->options_.by_reference_bytes > 0;
      self->deferred_.push_back([self, peer] { self->OpenSameHost(peer); });
    }
  }
  self->peers_changed_.NotifyAll();
  return UCS_OK;
}

// Same-host peers. UCX 1.13 gives an endpoint made by socket address (through its connection
// manager) TCP lanes for large messages even to a peer of this host: 4 MiB tensors moved at TCP
// speed over loopback (3.7 GB/s) where shared memory moves 9.7. An endpoint made by the peer's
// worker address gets shared memory alone. So after the handshake the client opens one to the
// server and announces it with a SameHost message; the server, hearing it, opens its own to the
// client (its SameHost cannot overtake the client's HelloReply, which came first). Each side
// sends through its new endpoint from then on; what is still in flight on the first one arrives
// as before. The first endpoint stays open, idle: what was sent on it may still be moving (a
// large tensor is pulled through it), and its TCP connection reports at once a peer process
// that ends or closes (shared memory tells no one). Its failure fails the peer, as the new
// one's does. (Closing it once idle would spare the progress thread an epoll_wait per poll,
// about a microsecond of latency, but "idle" needs both sides' word on every rendezvous.)
void UcxEngine::OpenSameHost(Peer* peer) {
  if (SendSameHost(peer)) return;
  // No offer of this process's memory went out: Connect waits for no answer to it.
  MutexLock lock(mu_);
  peer->awaiting_verdict = false;
  peers_changed_.NotifyAll();
}

bool UcxEngine::SendSameHost(Peer* peer) {
  if (peer->ep == nullptr || peer->first_ep != nullptr || peer->same_host_address.empty()) {
    return false;
  }
  std::string me;
  {
    MutexLock lock(mu_);
    if (peer->state != Peer::State::kReady) return false;
    me = task_;
  }
  SameHost offer{me, incarnation_, SameHostProof(peer, me, incarnation_)};
  if (options_.by_reference_bytes > 0) {
    offer.pid = static_cast<uint32_t>(getpid());
    offer.probe_address = reinterpret_cast<uintptr_t>(&probe_value_);
    offer.probe_value = probe_value_;
    if (probe_fd_ >= 0) {
      offer.probe_fd = static_cast<uint32_t>(probe_fd_);
      offer.probe_inode = probe_inode_;
    }
  }
  auto header = Encode(offer);
  if (!header.ok()) return false;  // not with names the handshake accepted
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer->same_host_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &OnEndpointError;
  ep.err_handler.arg = peer;
  ucp_ep_h handle = nullptr;
  ucs_status_t s = ucp_ep_create(worker_, &ep, &handle);
  if (s != UCS_OK) {
    Log(fmt::format("task {} at {} stays on its first endpoint: the same-host one failed: {}",
                    ReadyTask(peer), peer->address, ucs_status_string(s)));
    return false;
  }
  {
    MutexLock lock(mu_);
    peer_of_ep_[handle] = peer;
    stats_.same_host_peers++;
  }
  peer->first_ep = peer->ep;
  peer->ep = handle;
  SendControl(peer, MessageType::kSameHost, std::move(header).value());
  return offer.pid != 0;
}

ucs_status_t UcxEngine::OnSameHost(void* arg, const void* header, size_t header_length, void*,
                                   size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  self->PeerOf(param);
  auto m = DecodeSameHost({static_cast<const char*>(header), header_length});
  if (!m.ok()) {
    return self->Drop(fmt::format("a malformed SameHost message: {}", m.status().message()));
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || param->reply_ep == nullptr) {
    return self->Drop(fmt::format("a SameHost message from task {} with no endpoint", m->task));
  }
  Peer* peer = nullptr;
  {
    MutexLock lock(self->mu_);
    peer = self->ReadyPeer(m->task);
    if (peer == nullptr || peer->incarnation != m->incarnation) {
      lock.Unlock();
      return self->Drop(
          fmt::format("a SameHost message from task {}, which has no connection here", m->task));
    }
    if (!SameToken(m->proof, self->SameHostProof(peer, m->task, m->incarnation))) {
      lock.Unlock();
      return self->Drop(fmt::format("a SameHost message from task {} with a wrong token", m->task));
    }
    self->peer_of_ep_[param->reply_ep] = peer;
    peer->incoming.push_back(param->reply_ep);
    peer->last_heard = std::chrono::steady_clock::now();
  }
  // The server answers with its own.
  if (!peer->outgoing) self->deferred_.push_back([self, peer] { self->OpenSameHost(peer); });
  self->ProbePeer(peer, *m);
  return UCS_OK;
}

void UcxEngine::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  peer->impl->PeerFailed(peer, status);
}

void UcxEngine::PeerFailed(Peer* peer, ucs_status_t status, std::string_view reason) {
  Status why;
  std::vector<int64_t> steps;
  {
    MutexLock lock(mu_);
    if (peer->state == Peer::State::kClosed || peer->state == Peer::State::kFailed) {
      ForgetEndpoints(peer);
      deferred_.push_back([this, peer] { CloseEndpoint(peer); });
      return;
    }
    bool was_ready = peer->state == Peer::State::kReady;
    std::string_view words = reason.empty() ? ucs_status_string(status) : reason;
    why = was_ready ? Unavailable("lost the connection to task {} at {}: {}", peer->task,
                                  peer->address, words)
                    : Unavailable("cannot connect to {}: {}", peer->address, words);
    peer->state = Peer::State::kFailed;
    peer->failure = why;
    DropHeld(peer);
    auto it = peer_of_task_.find(peer->task);
    if (it != peer_of_task_.end() && it->second == peer) peer_of_task_.erase(it);
    peers_changed_.NotifyAll();
    if (was_ready) {
      steps = boxes_.open_steps();
    }
  }
  if (!why.ok() && !steps.empty()) Log(why.message());
  calls_.FailPeer(peer, why);
  // Every open step may be waiting on this peer: fail them all, here and in the other tasks.
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
