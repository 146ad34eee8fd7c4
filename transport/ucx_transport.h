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

namespace dflow::transport {

struct UcxTransportOptions {
  // This process's task: "/job:worker/task:1". Sends to devices of this task stay in memory.
  // Empty: a worker that takes the name the first connecting master assigns it.
  std::string task;
  // The cluster token: peers must present the same bytes (at most 1 KiB).
  std::string token;
  // Listen for peers on "host:port" (port 0 picks a free port); empty: no listener.
  std::string listen_address;
  // How long Connect waits for the peer's answer.
  std::chrono::milliseconds connect_timeout{10'000};
  // A connected peer that sends nothing for this long is lost (Unavailable naming it), as if
  // its endpoint had failed: this is how a link that goes down, which TCP reports only after
  // minutes, fails the steps within two seconds. Every peer is sent a heartbeat six times per
  // timeout. While a large tensor is being received (which delays what follows it on the same
  // connection) the limit grows by its bytes at 50 MB/s.
  std::chrono::milliseconds peer_timeout{1'500};
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
  // Told one line for each event a person should see: a refused or lost peer, a message
  // dropped as malformed. Called from the progress thread; null: stderr.
  std::function<void(std::string_view)> log;
};

struct TransportStats {
  uint64_t tensors_sent = 0;
  uint64_t tensors_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_dropped = 0;  // malformed, from an unknown endpoint, or for a finished step
  uint64_t same_host_peers = 0;   // peers this process reached by worker address (shared memory)
  uint64_t readable_peers = 0;    // peers whose memory this process reads (by_reference_bytes)
  uint64_t mappable_peers = 0;    // peers whose memfds this process maps (by_reference_bytes)
  uint64_t tensors_sent_by_reference = 0;      // of tensors_sent
  uint64_t tensors_sent_mapped = 0;            // of those: in a memfd the receiver maps
  uint64_t tensors_received_by_reference = 0;  // of tensors_received
  uint64_t tensors_received_mapped = 0;        // of those: read where they lie, not copied
  uint64_t step_thread_polls = 0;  // polls of the worker by waiting step threads that did work
};

class UcxTransport final : public RendezvousFactory {
 public:
  // Starts the progress thread and, when asked, the listener. InvalidArgument for a bad task
  // name, token or address; Unavailable when UCX cannot start or listen there.
  static Result<std::unique_ptr<UcxTransport>> Create(UcxTransportOptions options);
  // Fails every step still open (Cancelled), closes every endpoint and stops the thread.
  ~UcxTransport() override;

  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // This task's name (empty until assigned, for a worker started without one).
  std::string task() const;
  uint64_t incarnation() const;
  // "host:port" the listener bound (the real port when 0 was asked); empty without one.
  std::string listen_address() const;

  // Connects to the listener at "host:port" and runs the handshake; returns the peer's task.
  // `assign`: the task name the listener is to take (a master naming a worker); refused when
  // the listener already has another. Unavailable when nobody answers within connect_timeout;
  // PermissionDenied for a wrong token and FailedPrecondition for another protocol version or
  // name (the peer's reason quoted).
  Result<std::string> Connect(const std::string& address, const std::string& assign = "");
  // Tasks connected in either direction, handshake done, connection alive.
  std::vector<std::string> peers() const;
  TransportStats stats() const;

  // The call handler gets the calling task, the method and the payload, and must call `reply`
  // exactly once, from any thread, now or later: a result's bytes (at most kMaxCallBytes) or an
  // error, which reaches the caller unchanged.
  struct CallInfo {
    std::string from_task;
    uint16_t method = 0;
  };
  using Reply = std::function<void(Result<std::string>)>;
  using CallHandler = std::function<void(const CallInfo& call, std::string payload, Reply reply)>;
  // Serves requests from now on (requests that come with no handler set are answered
  // Unimplemented). Handlers run one at a time on the service thread, except for the
  // `quick_methods`: those calls run on the transport's thread as they arrive, which spares a
  // thread wake-up (the start of a step, say), so they must only hand the request on: never
  // block, never wait for a reply. Returns once no call of the previous handler is running (so
  // not from inside a handler).
  void SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods = {});
  // Asks `task` (connected) and waits for its reply: the result's bytes, or the handler's error
  // unchanged. DeadlineExceeded after `timeout`; Unavailable when the connection is lost first.
  Result<std::string> Call(const std::string& task, uint16_t method, std::string payload,
                           std::chrono::milliseconds timeout);
  // Call without waiting: `done` runs exactly once with what Call would return, on the
  // transport's thread (it must not block) or, for a request that cannot be sent, on this one.
  void CallAsync(const std::string& task, uint16_t method, std::string payload,
                 std::chrono::milliseconds timeout, Reply done);

  // The rendezvous of one step (RendezvousFactory). Thread-safe.
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override;

  class Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The task part of a device name: "/job:worker/task:1/device:CPU:0" -> "/job:worker/task:1".
// InvalidArgument when the name has no job or task.
Result<std::string> TaskOfDevice(std::string_view device);

}  // namespace dflow::transport
