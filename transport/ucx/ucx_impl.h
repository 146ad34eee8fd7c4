// Internal to transport/ucx/: UcxEngine, the state behind UcxTransport, shared by its source files:
//   ucx_transport.cc   start and stop, peers and their handshakes
//   ucx_progress.cc    the progress thread, and step threads polling in its stead
//   ucx_rendezvous.cc  tensors of Send/Recv, step boxes, aborts
//   ucx_calls.cc       requests and responses, the service thread
//   ucx_by_reference.cc  tensors copied straight out of a same-host sender's memory, or read
//                        where they lie (mapped)
// Threads: the progress thread drives the UCX worker, or lends it to a step's thread that waits
// for a Recv and polls it (Poll, framework/progress.h): every ucp_* call but ucp_worker_signal
// runs under progress_mu_, and "progress thread" below means whichever thread holds it. mu_
// guards the peers, step boxes and figures; callbacks run outside mu_. The calls waited on
// (PendingCalls) and the call handler (CallServer) keep their own locks.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framework/progress.h"
#include "framework/rendezvous_table.h"
#include "graph/mutex.h"
#include "graph/thread_annotations.h"
#include "transport/call_server.h"
#include "transport/pending_calls.h"
#include "transport/step_boxes.h"
#include "transport/step_rendezvous.h"
#include "transport/task_cache.h"
#include "transport/ucx/peer_memory.h"
#include "transport/ucx/ucx_options.h"
#include "transport/ucx/wire.h"

namespace dflow::transport {
namespace internal {

// The longest the progress thread sleeps without looking at its queue and the calls' deadlines
// (a missed wake-up costs at most this; a call's deadline is met within it).
constexpr int kMaxSleepMs = 50;

Status UcxError(std::string_view what, ucs_status_t status);

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};
// "host:port" or "[v6]:port"; the host may be a name (resolved here).
Result<SocketAddress> ParseAddress(std::string_view address);
std::string FormatAddress(const sockaddr_storage& s);
// Compares without stopping at the first difference.
bool SameToken(std::string_view a, std::string_view b);

}  // namespace internal

class UcxEngine : public ProgressEngine, public StepHost {
 public:
  struct Peer {
    UcxEngine* impl = nullptr;
    ucp_ep_h ep = nullptr;  // progress thread only: what messages to it go out on
    // Progress thread only. A peer of this host is reached through a second endpoint, made by
    // its worker address (`same_host_address`, from the handshake); the first one, by socket
    // address, is then `first_ep`, open beside it (see OpenSameHost).
    ucp_ep_h first_ep = nullptr;
    std::string same_host_address;
    // Guarded by impl->mu_: the endpoints UCX made here for the peer's own same-host endpoint
    // (what arrives through it names them as its reply endpoint).
    std::vector<ucp_ep_h> incoming;
    std::string address;
    bool outgoing = false;
    enum class State { kConnecting, kReady, kFailed, kClosed };
    State state = State::kConnecting;  // guarded by impl->mu_
    std::string task;                  // guarded by impl->mu_, set by the handshake
    uint64_t incarnation = 0;
    Status failure;  // guarded by impl->mu_: why kFailed
    // Guarded by impl->mu_: when a message from it last arrived.
    std::chrono::steady_clock::time_point last_heard = std::chrono::steady_clock::now();
    // Guarded by impl->mu_. The peer's process id once this process has read its memory or
    // mapped its memfd (the SameHost probe), so that tensors it sends by reference can be
    // copied (`reads`) or mapped (`maps`); 0 otherwise.
    int pid = 0;
    bool reads = false;
    bool maps = false;
    // Guarded by impl->mu_: the peer reads this process's memory or maps its memfds (its
    // PeerReads said so), so large tensors go to it by reference.
    bool reads_me = false;
    bool maps_me = false;
    // Guarded by impl->mu_: this process offered the peer its memory (SameHost) and has not
    // heard whether it reads it (Connect waits for that).
    bool awaiting_verdict = false;
    // Guarded by impl->mu_: the handshake's nonces (the server's Challenge, the client's Hello),
    // over which the proofs of the handshake and of SameHost are made (wire.h); and, for a
    // client, the name Connect asks the listener to take, sent in the Hello once the
    // Challenge comes.
    std::string server_nonce;
    std::string client_nonce;
    std::string assign;
    // When the connection was made (guarded by impl->mu_): a server's peer must finish the
    // handshake within connect_timeout of it.
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    // Guarded by impl->mu_: whether the handshake ever finished; when its endpoints were
    // closed (a peer never ready is freed peer_timeout after, once no send of it is in flight).
    bool was_ready = false;
    std::optional<std::chrono::steady_clock::time_point> closed_at;
    // What holds this Peer* outside mu_, so that a peer gone for a peer timeout is freed only
    // once nothing refers to it (CheckPeers): SendOps made and not finished (counted where they
    // are made, before they are posted), and `holds`: requests from it being served (until
    // their reply is made), tensors it sent by reference not yet released (TensorRef and
    // DeviceTensorRef until Release), a Connect waiting on it.
    std::atomic<int> sends{0};
    std::atomic<int> holds{0};
    // Guarded by impl->mu_: this process said Goodbye to the peer; the peer said it (or
    // answered ours), so its end is a departure, not a loss.
    bool said_goodbye = false;
    bool left = false;
  };

  // A tensor that arrived before its Recv, as it waits in its step's table.
  struct Arrival {
    Tensor tensor;         // arrived in memory
    void* desc = nullptr;  // arrived as a UCX rendezvous message, not yet pulled
    TensorHeader header;   // what a desc or a reference holds
    std::string from_task;
    // Arrived by reference (TensorRef), not yet copied: where in which process, and the peer
    // to tell once copied (non-null exactly then).
    Peer* ref_peer = nullptr;
    int ref_pid = 0;
    uint64_t ref_address = 0;
    uint64_t ref_id = 0;
  };
  using Table = RendezvousTable<Arrival>;
  using StepBox = StepBoxes<Arrival>::Box;

  // One send in flight: the header must live until UCX is done with it, and the tensor holds
  // the payload's memory.
  struct SendOp {
    UcxEngine* impl = nullptr;
    Peer* peer = nullptr;
    MessageType type = MessageType::kTensor;
    std::string header;
    Tensor tensor;
    std::string bytes;  // a request's or response's payload
    int64_t step = 0;
    uint64_t call_id = 0;  // of a request
    std::string what;      // for messages other than tensors
    // "KEY of Send 'n'" for a tensor (read back from its header: only failures need it), or
    // `what`.
    std::string What() const;
    uint64_t ref_id = 0;  // a TensorRef's: its entry in held_
    bool mapped = false;  // a TensorRef's: to a peer that maps the memfd it lies in
  };

  // One tensor on its way into a Recv's buffer through UCX's rendezvous protocol.
  struct RecvOp {
    UcxEngine* impl = nullptr;
    std::shared_ptr<StepBox> box;
    RendezvousKey key;
    std::string send_node;
    std::string from_task;
    Tensor tensor;
    RecvArgs recv;
    Rendezvous::DoneCallback done;
  };

  explicit UcxEngine(UcxTransportOptions options)
      : options_(std::move(options)), task_(options_.task) {}
  ~UcxEngine();

  Status Start();
  Result<std::string> Connect(const std::string& address, const std::string& assign_task);
  std::string task() const DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return task_;
  }
  std::vector<std::string> peers() const;
  // TaskOfDevice, remembered for the devices seen (every Send and arriving tensor asks).
  Result<std::string> TaskOf(std::string_view device) { return task_cache_.TaskOf(device); }
  // Rendezvous::TakesDeviceMemory: the Recv of `key` is in this task, or in a task of this host
  // (its SameHost probe succeeded), which reads device memory by the handle a Send exports.
  bool TakesDeviceMemory(const RendezvousKey& key) override DFLOW_EXCLUDES(mu_);
  // The calls this process waits on (for their reply limits).
  PendingCalls& calls() { return calls_; }
  TransportStats stats() const {
    MutexLock lock(mu_);
    TransportStats s = stats_;
    s.step_thread_polls = step_thread_polls_.load(std::memory_order_relaxed);
    s.peer_states = all_peers_.size();
    return s;
  }

  // Rendezvous operations (any thread).
  Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) override;
  void RecvAsync(const RendezvousKey& key, const RecvArgs& args,
                 Rendezvous::DoneCallback done) override;
  void CancelRecv(const RendezvousKey& key, const Status& why) override;
  // Fails the step here; `tell_peers`: and in every connected task.
  void AbortStep(int64_t step, const Status& status, bool tell_peers) override;
  // The step's rendezvous is gone: forget it, and drop what still arrives for it.
  void ReleaseStep(int64_t step) override;
  void AttachStep(int64_t step) override;

  const UcxTransportOptions& options() const { return options_; }

  // Requests (ucx_calls.cc).
  void SetCallHandler(Transport::CallHandler handler, std::vector<uint16_t> quick_methods) {
    server_.SetHandler(std::move(handler), std::move(quick_methods));
  }
  void CallAsync(const std::string& task, uint16_t method, std::string payload,
                 std::chrono::milliseconds timeout, Transport::Reply done) DFLOW_EXCLUDES(mu_);
  uint64_t incarnation() const { return incarnation_; }
  std::string listen_address() const { return bound_address_; }

  // ProgressEngine: a step thread waiting for a Recv drives the worker itself.
  void BeginPolling() override;
  void EndPolling() override;
  bool Poll() override;

 private:
  void Log(std::string_view line) { LogTransportLine(options_, task(), line); }
  // Runs `fn` on the progress thread.
  void Post(std::function<void()> fn) DFLOW_EXCLUDES(queue_mu_);
  void Loop();
  // One turn of the progress thread's work (posted work, the worker, deferred work): whether
  // there was any.
  bool ProgressOnce() DFLOW_REQUIRES(progress_mu_);
  // The progress thread's turn: housekeeping, then ProgressOnce and a spell of polling while
  // no step thread polls. True when it armed the worker's fd and should sleep on it.
  bool Turn() DFLOW_EXCLUDES(progress_mu_);
  bool RunPosted() DFLOW_EXCLUDES(queue_mu_);
  void RunDeferred();
  void ShutdownOnThread();

  // Progress thread.
  void StartSend(SendOp* op);
  static void SendDone(void* request, ucs_status_t status, void* user_data);
  void FinishSend(SendOp* op, ucs_status_t status);
  void SendControl(Peer* peer, MessageType type, std::string header);
  // Starts pulling a UCX rendezvous message's data into `buffer`: UCS_INPROGRESS when `done`
  // will be called, otherwise the final status (and `done` is not called).
  ucs_status_t Pull(void* desc, void* buffer, size_t length, ucp_am_recv_data_nbx_callback_t done,
                    void* user_data);
  void StartRecv(RecvOp* op, void* desc, size_t length);
  static void RecvDone(void* request, ucs_status_t status, size_t length, void* user_data);
  void FinishRecv(RecvOp* op, ucs_status_t status);
  void ReleaseDesc(void* desc) { ucp_am_data_release(worker_, desc); }
  void CloseEndpoint(Peer* peer);
  // Closes `ep` at once (progress thread): the close's request when it is still under way (the
  // caller frees it), otherwise null.
  void* CloseUcpEndpoint(ucp_ep_h ep);
  // `reason`, when given, replaces UCX's words for `status`.
  // `left`: the peer said goodbye (its failure says it left, not that it was lost).
  void PeerFailed(Peer* peer, ucs_status_t status, std::string_view reason = {}, bool left = false);
  static ucs_status_t OnGoodbye(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  // The peer a message came from (null when unknown), which is thereby heard from; `activity`:
  // the message is work (not a heartbeat), so the progress thread polls a while for more.
  Peer* PeerOf(const ucp_am_recv_param_t* param, bool activity = true) DFLOW_EXCLUDES(mu_);
  // The task of a peer that finished its handshake; empty for null or any other peer.
  std::string ReadyTask(const Peer* peer) DFLOW_EXCLUDES(mu_) {
    if (peer == nullptr) return "";
    MutexLock lock(mu_);
    return peer->state == Peer::State::kReady ? peer->task : "";
  }

  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  void Accept(ucp_conn_request_h request) DFLOW_EXCLUDES(mu_);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnChallenge(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  // The client's Hello, once the server's Challenge came (on the progress thread); the peer
  // fails when it cannot be made.
  void SendHello(Peer* peer);
  // The proof a SameHost from `task` (`incarnation`) carries over `peer`'s connection.
  std::string SameHostProof(const Peer* peer, const std::string& task, uint64_t incarnation) const;
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnHelloReply(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnTensor(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnSameHost(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  // Whether a peer's handshake offered a same-host endpoint this process can take.
  bool SameHostOffer(const std::string& host, const std::string& address) const {
    return !host_.empty() && host == host_ && !address.empty();
  }
  // Opens the second endpoint to a peer of this host and switches its messages to it.
  void OpenSameHost(Peer* peer);
  // OpenSameHost's work: whether an offer of this process's memory went out.
  bool SendSameHost(Peer* peer);
  // Takes every endpoint of `peer` out of peer_of_ep_.
  void ForgetEndpoints(Peer* peer) DFLOW_REQUIRES(mu_);
  void ForgetEndpoint(Peer* peer, ucp_ep_h ep) DFLOW_REQUIRES(mu_);
  static ucs_status_t OnHeartbeat(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  // Sends heartbeats and fails the peers silent for longer than the peer timeout (progress
  // thread, at most every heartbeat interval).
  void CheckPeers();
  static ucs_status_t OnAbortStep(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t ReceiveTensor(std::string_view header, void* data, size_t length,
                             const ucp_am_recv_param_t* param);

  // Tensors by reference (ucx_by_reference.cc).
  static ucs_status_t OnTensorRef(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t ReceiveTensorRef(std::string_view header, const ucp_am_recv_param_t* param);
  // A tensor in the sender's device memory: delivered as a tensor over PeerDeviceMemory
  // (framework/peer_device_memory.h), whose death answers TensorRefDone.
  static ucs_status_t OnDeviceTensorRef(void* arg, const void* header, size_t header_length,
                                        void* data, size_t length,
                                        const ucp_am_recv_param_t* param);
  // A tensor borrowed from `from_task` (mapped) meets its Recv, or waits in its slot for it.
  ucs_status_t ArriveBorrowed(const TensorHeader& h, const std::string& from_task, Tensor tensor)
      DFLOW_EXCLUDES(mu_);
  // ArriveUnderLock, taking mu_.
  bool Arrive(const RendezvousKey& key, const std::string& send_node, Arrival& arrival,
              std::optional<Table::Waiting>* waiting, std::string* why) DFLOW_EXCLUDES(mu_);
  static ucs_status_t OnTensorRefDone(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnPeerReads(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  // The SameHost probe of `m` (progress thread): whether this process reads the peer's memory
  // (then it notes its pid), told to the peer (PeerReads).
  void ProbePeer(Peer* peer, const SameHost& m) DFLOW_EXCLUDES(mu_);
  // For a slot that arrived by reference: copies the tensor into a buffer of the Recv's
  // allocator, tells the sender and delivers it, or fails the Recv and the step (Unavailable
  // naming the Send, the Recv and the task when the sender's memory cannot be read).
  void TakeByReference(const Arrival& arrival, const std::string& send_node,
                       const RendezvousKey& key, const RecvArgs& recv,
                       const Rendezvous::DoneCallback& done);
  Status CopyByReference(const Arrival& arrival, const std::string& send_node,
                         const RendezvousKey& key, std::string_view recv_node, Tensor* into)
      DFLOW_EXCLUDES(mu_);
  // Lets go of arrivals no Recv will take: their UCX messages released, their senders told.
  void LetGo(std::vector<Arrival> arrivals) DFLOW_EXCLUDES(mu_);
  // Tells each peer that the tensors it sent by reference with these ids are copied or
  // dropped (any thread; sent from the progress thread).
  void Release(std::vector<std::pair<Peer*, uint64_t>> refs);
  // Forgets the tensors held for `peer` (it is lost).
  void DropHeld(Peer* peer) DFLOW_REQUIRES(mu_);
  ucs_status_t Drop(std::string_view why) DFLOW_EXCLUDES(mu_);

  // Requests and responses: payloads arrive eagerly or are pulled into a string.
  struct Blob {
    UcxEngine* impl = nullptr;
    std::string bytes;
    std::function<void(Status, std::string)> then;  // runs on the progress thread
  };
  static ucs_status_t OnRequest(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnResponse(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  // Hands the payload to `then` (now, or once pulled); UCS_INPROGRESS when pulled later.
  ucs_status_t TakePayload(void* data, size_t length, const ucp_am_recv_param_t* param,
                           std::function<void(Status, std::string)> then);
  static void BlobDone(void* request, ucs_status_t status, size_t length, void* user_data);
  void Respond(Peer* peer, uint64_t call_id, Result<std::string> result);

  // A tensor from arrival.from_task for `key` arrives in its step's table (the step's box in
  // *box): the Recv that waited for it, taken out (*waiting; `arrival` left to the caller), or
  // none (`arrival` parked in the table, moved from). False, with *why, when it is dropped
  // instead: its step is over here, or it came twice.
  bool ArriveUnderLock(const RendezvousKey& key, const std::string& send_node, Arrival& arrival,
                       std::optional<Table::Waiting>* waiting, std::shared_ptr<StepBox>* box,
                       std::string* why) DFLOW_REQUIRES(mu_);
  Peer* ReadyPeer(const std::string& task) DFLOW_REQUIRES(mu_);

  UcxTransportOptions options_;
  std::string task_ DFLOW_GUARDED_BY(mu_);  // options_.task, or the name a master assigned
  uint64_t incarnation_ = ProcessIncarnation();
  std::string bound_address_;
  // Offered in handshakes when shared memory is on (see Hello in wire.h): empty otherwise.
  std::string host_;
  std::string worker_address_;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;  // the progress thread's, once it runs
  ucp_listener_h listener_ = nullptr;
  int efd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<std::function<void()>> deferred_;       // progress thread only
  std::chrono::steady_clock::time_point next_check_;  // progress thread: of CheckPeers
  // Progress thread: when it last had work (it polls a while after, then sleeps).
  std::chrono::steady_clock::time_point last_work_;
  std::chrono::microseconds hot_spin_{0};  // polling without yielding after work (Loop sets)
  uint64_t pulling_bytes_ = 0;             // progress thread: of tensors and payloads being pulled

  TaskCache task_cache_;

  Mutex queue_mu_;
  std::vector<std::function<void()>> queue_ DFLOW_GUARDED_BY(queue_mu_);
  std::atomic<bool> posted_{false};
  std::atomic<bool> sleeping_{false};  // the progress thread waits on efd_ (or is about to)

  // Held by the thread that drives the worker: the progress thread, or a polling step thread.
  Mutex progress_mu_;
  // Step threads polling (BeginPolling): the progress thread then parks on parked_cv_ (up to
  // kParkTime, for heartbeats and deadlines) instead of polling beside them.
  std::atomic<int> pollers_{0};
  std::atomic<uint64_t> step_thread_polls_{0};  // TransportStats::step_thread_polls
  Mutex park_mu_;
  CondVar parked_cv_;
  bool polled_ = false;  // registered as a progress engine (Start, until ~UcxEngine)
  bool closed_ DFLOW_GUARDED_BY(queue_mu_) = false;  // the progress thread has ended

  mutable Mutex mu_;
  CondVar peers_changed_;
  // Every peer, until it has been gone for a peer timeout and nothing holds it (CheckPeers).
  std::vector<std::unique_ptr<Peer>> all_peers_ DFLOW_GUARDED_BY(mu_);
  std::unordered_map<ucp_ep_h, Peer*> peer_of_ep_ DFLOW_GUARDED_BY(mu_);
  std::unordered_map<std::string, Peer*> peer_of_task_ DFLOW_GUARDED_BY(mu_);
  StepBoxes<Arrival> boxes_ DFLOW_GUARDED_BY(mu_);
  TransportStats stats_ DFLOW_GUARDED_BY(mu_);
  // Tensors sent by reference, by id, held until their receiver answers TensorRefDone or is
  // lost.
  struct Held {
    Tensor tensor;
    Peer* peer = nullptr;
    bool shared = false;  // sent as a memfd region the receiver maps
  };
  std::unordered_map<uint64_t, Held> held_ DFLOW_GUARDED_BY(mu_);
  uint64_t next_ref_id_ DFLOW_GUARDED_BY(mu_) = 1;
  // Read by same-host peers to learn whether they can read this process's memory (SameHost),
  // and at the start of probe_fd_, a memfd, whether they can map its memfds.
  uint64_t probe_value_ = 0;
  int probe_fd_ = -1;
  uint64_t probe_inode_ = 0;
  // Makes probe_fd_, the memfd peers map to learn whether they can map this process's tensors
  // (SameHost); none when that fails.
  void MakeProbe();
  // Retires the memfds of every held tensor: their receivers may still map them (at the end).
  void RetireHeld() DFLOW_EXCLUDES(mu_);

  PeerMappings mappings_;  // progress thread only
  // Tensors borrowed from peers (mapped) tell their sender when they die through this, which
  // outlives the engine: `impl` is null once it is gone.
  struct Releaser {
    Mutex mu;
    UcxEngine* impl DFLOW_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<Releaser> releaser_ = std::make_shared<Releaser>();
  class BorrowedMemory;
  // The tensor of `ref` from `peer` (process `pid`) read where it lies: a read-only tensor over
  // the mapped memfd, whose death answers TensorRefDone (progress thread).
  Result<Tensor> Borrow(Peer* peer, int pid, const TensorRef& ref);

  // Calls this process waits on (their deadlines checked by the progress thread), tagged with
  // their Peer*.
  PendingCalls calls_;
  // Runs the call handler: on its service thread, or on the progress thread for quick methods.
  CallServer server_{"dflow service", [this] { return task(); }};
};

}  // namespace dflow::transport
