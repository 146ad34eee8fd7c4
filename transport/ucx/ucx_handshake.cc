// The handshake of a connection (transport/ucx/wire.h): the listener accepts and challenges,
// the client answers with its Hello and proof, the listener replies; peers of one host then open
// their same-host endpoints (SameHost).
#include <fmt/format.h>

#include <cstring>
#include <random>

#include "graph/device_name.h"
#include "transport/ucx/hmac.h"
#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

using namespace internal;

namespace {

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

}  // namespace

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
    int handshaking = 0;
    for (const auto& p : all_peers_) {
      handshaking += !p->outgoing && p->state == Peer::State::kConnecting;
    }
    if (handshaking >= options_.max_handshaking) {
      const uint64_t refused = ++stats_.connections_refused;
      lock.Unlock();
      ucp_listener_reject(listener_, request);
      // One line for the first and then every thousandth: a flood must not flood the log too.
      if (refused % 1000 == 1) {
        Log(
            fmt::format("refused a connection from {}: {} connections are still shaking hands "
                        "(the limit; {} refused so far)",
                        from, handshaking, refused));
      }
      return;
    }
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
    peer->holds++;  // this Connect's, until it returns
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
  struct Unhold {
    Peer* peer;
    ~Unhold() { peer->holds--; }
  } unhold{peer};
  // A peer of this host is ready once it has said whether it reads this process's memory, so
  // that tensors go by reference from the first step on (without its word in time they go
  // through UCX until it comes).
  bool answered = peers_changed_.WaitFor(mu_, options_.connect_timeout, [&]() DFLOW_REQUIRES(mu_) {
    return peer->state != Peer::State::kConnecting &&
           !(peer->state == Peer::State::kReady && peer->awaiting_verdict);
  });
  if (!answered && peer->state == Peer::State::kReady) answered = true;
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
      peer->was_ready = true;
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
    peer->was_ready = true;
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

}  // namespace dflow::transport
