// UcxTransport: this process's UCX endpoint to the other dflow processes, and the rendezvous
// that carries Send/Recv between them.
//
// One UCP context and one worker per transport, owned by a progress thread: other threads never
// call UCX; they queue work for that thread and wake it (ucp_worker_signal). When idle, the
// thread sleeps on the worker's event fd, so an idle transport costs no CPU.
//
// Peers: the transport listens on a socket address (optional) and connects to others by
// "host:port". Every connection starts with a handshake (transport/wire.h Hello): the protocol
// version and the cluster token must match, or the listener refuses with the reason and both
// sides report it. One endpoint per peer, reused across steps, in UCX's peer error mode: a peer
// that dies fails its endpoint, and every step's rendezvous on this process fails with
// Unavailable naming the peer's task (nothing waits for a dead peer).
//
// Requests (the control plane): a task asks another with Call(task, method, payload) and waits
// for the reply, over the same connection; the receiving transport hands each request to its
// call handler on a service thread of its own, so a slow handler never stalls tensors.
//
// Rendezvous (framework/rendezvous.h): a Send whose key's destination device belongs to another
// task travels to that task as an active message: the key, the Send node, dtype and shape in
// the header and the tensor's bytes as the payload. Small tensors go eagerly; large ones use
// UCX's rendezvous protocol and land straight in a buffer from the Recv's allocator (no copy on
// either side beyond UCX's own). A Send to a device of this task is handed over in memory.
// Tensors may arrive before the step's rendezvous exists here; they wait for it. Aborting a
// step's rendezvous tells every peer, whose rendezvous for that step then fails too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/rendezvous.h"
#include "graph/status.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_options.h"

namespace dflow::transport {

class UcxEngine;  // transport/ucx/ucx_impl.h

class UcxTransport final : public Transport {
 public:
  // Starts the progress thread and, when asked, the listener. InvalidArgument for a bad task
  // name, token or address; Unavailable when UCX cannot start or listen there.
  static Result<std::unique_ptr<UcxTransport>> Create(UcxTransportOptions options);
  // Fails every step still open (Cancelled), closes every endpoint and stops the thread.
  ~UcxTransport() override;

  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // Transport.
  std::string task() const override;
  uint64_t incarnation() const override;
  std::string listen_address() const override;
  Result<std::string> Connect(const std::string& address, const std::string& assign = "") override;
  std::vector<std::string> peers() const override;
  TransportStats stats() const override;
  // Requests take at most kMaxCallBytes (transport/ucx/wire.h).
  void SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods = {}) override;
  void CallAsync(const std::string& task, uint16_t method, std::string payload,
                 std::chrono::milliseconds timeout, Reply done) override;
  void SetReplyLimit(uint16_t method, uint64_t bytes) override;

  // The rendezvous of one step (RendezvousFactory). Thread-safe.
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override;

 private:
  explicit UcxTransport(std::unique_ptr<UcxEngine> engine);
  std::unique_ptr<UcxEngine> impl_;
};

// Registers "ucx" (UcxTransport with its defaults) with `registry`: transport/CMakeLists.txt's
// one line for this transport.
Status RegisterUcxTransport(TransportRegistry& registry);

}  // namespace dflow::transport
