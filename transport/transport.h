// Transport: this process's connections to the other dflow processes of its cluster (its master,
// its fellow workers), the one seam distributed/ and the tools cross to reach them:
//
//   requests   a task asks another by name (Call / CallAsync: method number and payload bytes,
//              distributed/messages.h gives them meaning); the asked task's call handler answers;
//   tensors    the rendezvous of a step (RendezvousFactory, framework/rendezvous.h): a Send whose
//              Recv is in another task reaches it through the transport; one in this task is
//              handed over in memory. Aborting a step's rendezvous fails that step in every task.
//
// Every connection starts with a handshake checking the protocol version and the cluster token;
// a peer that dies, leaves or goes silent fails every pending call to it and every step waiting
// for its tensors with Unavailable naming its task, and a later receive from it fails at once,
// so nothing waits for it; steps that need nothing of it go on.
//
// Implementations register by name (TransportRegistry below): "ucx" (transport/ucx/) where UCX
// is built, "inproc" (transport/inproc/) always. docs/architecture.md says what a new one touches.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/rendezvous.h"
#include "graph/mutex.h"
#include "graph/status.h"
#include "transport/transport_options.h"

namespace dflow::transport {

// What a transport has moved. Counters an implementation has no use for stay 0.
struct TransportStats {
  uint64_t tensors_sent = 0;
  uint64_t tensors_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_dropped = 0;  // malformed, from an unknown peer, or for a finished step
  uint64_t same_host_peers = 0;   // peers reached through shared memory
  uint64_t readable_peers = 0;    // peers whose memory this process reads
  uint64_t mappable_peers = 0;    // peers whose memfds this process maps
  uint64_t tensors_sent_by_reference = 0;      // of tensors_sent
  uint64_t tensors_sent_mapped = 0;            // of those: in a memfd the receiver maps
  uint64_t tensors_received_by_reference = 0;  // of tensors_received
  uint64_t tensors_received_mapped = 0;        // of those: read where they lie, not copied
  uint64_t step_thread_polls = 0;  // polls of the transport by waiting step threads that did work
  uint64_t handshakes_timed_out = 0;  // connections closed without a finished handshake
  uint64_t connections_refused = 0;   // over max_handshaking, refused at once
  uint64_t peer_states = 0;           // peers this process keeps state for (live or lately gone)
};

class Transport : public RendezvousFactory {
 public:
  ~Transport() override = default;

  // This task's name (empty until assigned, for a worker started without one).
  virtual std::string task() const = 0;
  // The incarnation of this process (framework/rendezvous_key.h).
  virtual uint64_t incarnation() const = 0;
  // The address the listener bound (the real port when 0 was asked); empty without one.
  virtual std::string listen_address() const = 0;

  // Connects to the listener at `address` and runs the handshake; returns the peer's task.
  // `assign`: the task name the listener is to take when it has none yet (a master naming a
  // worker); a listener already named keeps its name and answers with it, so the name it was
  // given here is the caller's own for it (distributed/task_names.h: each master names its
  // workers as it likes). Unavailable when nobody answers within connect_timeout;
  // PermissionDenied for a wrong token and FailedPrecondition for another protocol version or
  // name (the peer's reason quoted).
  virtual Result<std::string> Connect(const std::string& address,
                                      const std::string& assign = "") = 0;
  // Tasks connected in either direction, handshake done, connection alive.
  virtual std::vector<std::string> peers() const = 0;
  virtual TransportStats stats() const = 0;

  // The call handler gets the calling task, the method and the payload, and must call `reply`
  // exactly once, from any thread, now or later: a result's bytes or an error, which reaches
  // the caller unchanged.
  struct CallInfo {
    std::string from_task;
    uint16_t method = 0;
  };
  using Reply = std::function<void(Result<std::string>)>;
  using CallHandler = std::function<void(const CallInfo& call, std::string payload, Reply reply)>;
  // Serves requests from now on (requests that come with no handler set are answered
  // Unimplemented). Handlers run one at a time on a service thread, except for the
  // `quick_methods`: those run on the transport's own thread as they arrive, which spares a
  // thread wake-up (the start of a step, say), so they must only hand the request on: never
  // block, never wait for a reply. Returns once no call of the previous handler is running (so
  // not from inside a handler).
  virtual void SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods = {}) = 0;
  // Asks `task` (connected) without waiting: `done` runs exactly once with the result's bytes or
  // the handler's error unchanged; DeadlineExceeded after `timeout`; Unavailable when the
  // connection is lost first. It runs on the transport's thread (it must not block) or, for a
  // request that cannot be sent, on this one.
  virtual void CallAsync(const std::string& task, uint16_t method, std::string payload,
                         std::chrono::milliseconds timeout, Reply done) = 0;
  // The most bytes a reply to a call of `method` may have: a larger one ends the call with
  // ResourceExhausted naming the task and the method, its bytes not taken in (so a peer cannot
  // make this process hold a gigabyte for a list of devices). Unset: kMaxReplyBytes (1 GiB).
  virtual void SetReplyLimit(uint16_t method, uint64_t bytes) = 0;
  // CallAsync, waiting for its result.
  Result<std::string> Call(const std::string& task, uint16_t method, std::string payload,
                           std::chrono::milliseconds timeout);
};

// Transports by name. The process-wide registry holds every transport built (its Global() is
// generated by transport/CMakeLists.txt, one line per implementation); tests add stand-ins.
class TransportRegistry {
 public:
  using CreateFn = std::function<Result<std::unique_ptr<Transport>>(TransportOptions)>;

  static TransportRegistry& Global();

  // InvalidArgument when `name` is empty or taken. `local_address`: a listen address of this
  // host that picks a free place ("127.0.0.1:0"), for tests and one-host tools.
  Status Register(const std::string& name, CreateFn create, std::string local_address)
      DFLOW_EXCLUDES(mu_);
  // NotFound when absent.
  Status Unregister(const std::string& name) DFLOW_EXCLUDES(mu_);
  // A transport of kind `name`; NotFound naming it and the ones built when there is none.
  Result<std::unique_ptr<Transport>> Create(const std::string& name, TransportOptions options) const
      DFLOW_EXCLUDES(mu_);
  std::vector<std::string> names() const DFLOW_EXCLUDES(mu_);
  // The local_address `name` registered with; NotFound when absent.
  Result<std::string> LocalAddress(const std::string& name) const DFLOW_EXCLUDES(mu_);

 private:
  struct Kind {
    CreateFn create;
    std::string local_address;
  };
  mutable Mutex mu_;
  std::map<std::string, Kind> kinds_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow::transport
