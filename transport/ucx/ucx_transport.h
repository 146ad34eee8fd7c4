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

namespace dflow::transport {

// TransportOptions' listen_address is "host:port" here. Every peer is sent a heartbeat six times
// per peer_timeout, and while a large tensor is being received (which delays what follows it on
// the same connection) the timeout grows by its bytes at 50 MB/s: this is how a link that goes
// down, which TCP reports only after minutes, fails the steps within two seconds.
struct UcxTransportOptions : TransportOptions {
  // Reach peers on this host through shared memory (UCX's sysv/posix transports) rather than
  // TCP over loopback; UCX picks per peer. The environment's UCX_MM_ERROR_HANDLING, when set,
  // decides instead (=n keeps such peers on TCP, as between two hosts).
  bool shared_memory = true;
  // Between processes of this host, tensors of this many bytes or more travel by reference:
  // the receiver reads them where they lie when they are in a memfd of the sender (a worker's
  // allocator makes its large blocks memfds, CpuAllocator::set_shareable) and it may map it
  // (/proc/PID/fd, the same user), or else copies them straight out of the sender's memory,
  // once (process_vm_readv: the same user, unless Yama's ptrace_scope forbids it, or
  // CAP_SYS_PTRACE), and tells the sender when it may free them (UCX's shared memory copies a
  // tensor three times, in 8 KiB fragments, through two progress threads). What a peer allows
  // is tried when it connects (a probe); otherwise, and with 0 here on either side, tensors go
  // through UCX. Needs shared_memory. The environment's DFLOW_BY_REFERENCE_BYTES, when set,
  // decides instead.
  size_t by_reference_bytes = 64 << 10;
  // A step's thread that waits for a Recv polls the UCX worker itself (framework/progress.h) and
  // the progress thread parks meanwhile, as MPI's ranks poll: the tensor then arrives without
  // a hand-off between threads (a wake-up, 10 to 50 us on a small virtual machine, twice per
  // hop of a ring all-reduce). Off: only the progress thread touches the worker.
  bool polled_by_steps = true;
};

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

  // The rendezvous of one step (RendezvousFactory). Thread-safe.
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override;

  class Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Registers "ucx" (UcxTransport with its defaults) with `registry`: transport/CMakeLists.txt's
// one line for this transport.
Status RegisterUcxTransport(TransportRegistry& registry);

}  // namespace dflow::transport
