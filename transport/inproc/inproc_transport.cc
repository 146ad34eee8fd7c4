#include "transport/inproc/inproc_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "framework/rendezvous_delivery.h"
#include "graph/device_name.h"
#include "transport/call_server.h"
#include "transport/pending_calls.h"
#include "transport/step_boxes.h"
#include "transport/step_rendezvous.h"

namespace dflow::transport {
namespace {

// A thread that runs posted functions in order and, between them at least every kTick, `tick`.
// What is posted once it stops is dropped.
class EventThread {
 public:
  static constexpr auto kTick = std::chrono::milliseconds(10);

  EventThread(const char* name, std::function<void()> tick) : tick_(std::move(tick)) {
    thread_ = std::thread([this, name] {
      pthread_setname_np(pthread_self(), name);
      Loop();
    });
  }
  // Runs what is queued, then stops.
  ~EventThread() { Stop(); }

  void Post(std::function<void()> fn) DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (stop_) return;
    queue_.push_back(std::move(fn));
    cv_.NotifyOne();
  }
  void Stop() DFLOW_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stop_ = true;
      cv_.NotifyOne();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (true) {
      cv_.WaitFor(mu_, kTick, [&]() DFLOW_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      std::deque<std::function<void()>> batch;
      batch.swap(queue_);
      lock.Unlock();
      for (auto& fn : batch) fn();
      if (tick_) tick_();
      lock.Lock();
    }
  }

  std::function<void()> tick_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ DFLOW_GUARDED_BY(mu_);
  bool stop_ DFLOW_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The transports of this process that listen, by address.
struct Listeners {
  Mutex mu;
  std::map<std::string, std::weak_ptr<InprocTransport::Impl>> by_address DFLOW_GUARDED_BY(mu);
  uint64_t next DFLOW_GUARDED_BY(mu) = 1;
};
Listeners& TheListeners() {
  static auto* listeners = new Listeners;
  return *listeners;
}

// A copy of host tensor `t` of its own in host memory, as another process would receive it.
Result<Tensor> CopyToHost(const Tensor& t) {
  ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(CpuAllocator::Default(), t.dtype(), t.shape()));
  if (t.num_bytes() > 0) std::memcpy(out.raw_data(), t.raw_data(), t.num_bytes());
  return out;
}

}  // namespace

class InprocTransport::Impl final : public StepHost, public std::enable_shared_from_this<Impl> {
 public:
  explicit Impl(TransportOptions options) : options_(std::move(options)), task_(options_.task) {}

  Status Start(std::string address) {
    address_ = std::move(address);
    events_ = std::make_unique<EventThread>("dflow inproc", [this] { calls_.Expire(); });
    return Status::OK();
  }

  // The transport is destroyed: its peers lose it, its calls and steps fail, its threads stop.
  void Shutdown() DFLOW_EXCLUDES(mu_) {
    std::vector<std::shared_ptr<Impl>> peers;
    std::vector<int64_t> steps;
    std::string me;
    {
      MutexLock lock(mu_);
      closed_ = true;
      me = task_;
      for (auto& [task, weak] : peers_) {
        if (auto p = weak.lock()) peers.push_back(std::move(p));
      }
      peers_.clear();
      steps = boxes_.open_steps();
    }
    if (!address_.empty()) {
      Listeners& l = TheListeners();
      MutexLock lock(l.mu);
      auto it = l.by_address.find(address_);
      if (it != l.by_address.end() && it->second.lock().get() == this) l.by_address.erase(it);
    }
    const Status down = Cancelled("the transport of task {} is shutting down", me);
    for (int64_t step : steps) AbortStep(step, down, false);
    for (auto& p : peers) {
      p->PeerLost(me, Unavailable("lost the connection to task {}: its transport shut down", me));
    }
    server_.Stop();
    events_->Stop();
    calls_.FailTask("", down);  // what the threads left
  }

  std::string task() const DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return task_;
  }
  const std::string& address() const { return address_; }

  Result<std::string> Connect(const std::string& address, const std::string& assign) {
    const std::string me = task();
    if (me.empty()) {
      return FailedPrecondition("this process has no task name yet, so it cannot connect to {}",
                                address);
    }
    std::shared_ptr<Impl> other;
    {
      Listeners& l = TheListeners();
      MutexLock lock(l.mu);
      auto it = l.by_address.find(address);
      if (it != l.by_address.end()) other = it->second.lock();
    }
    if (other == nullptr) return Unavailable("nobody in this process listens at {}", address);
    if (other.get() == this) return FailedPrecondition("task {} connected to itself", me);
    ASSIGN_OR_RETURN(std::string peer_task,
                     other->Accept(shared_from_this(), me, options_.token, assign));
    MutexLock lock(mu_);
    if (closed_) return Cancelled("the transport of task {} is shutting down", me);
    peers_[peer_task] = other;
    return peer_task;
  }

  // At the listener: the handshake of a transport connecting to this one.
  Result<std::string> Accept(const std::shared_ptr<Impl>& from, const std::string& from_task,
                             const std::string& token, const std::string& assign)
      DFLOW_EXCLUDES(mu_) {
    std::string named;
    Result<std::string> out = [&]() -> Result<std::string> {
      MutexLock lock(mu_);
      auto refused = [&](std::string_view reason) DFLOW_REQUIRES(mu_) {
        return fmt::format("task {} at {} refused the connection: {}",
                           task_.empty() ? "(unnamed)" : task_, address_, reason);
      };
      if (closed_) return Unavailable("{}", refused("it is shutting down"));
      if (token.size() != options_.token.size() ||
          std::memcmp(token.data(), options_.token.data(), token.size()) != 0) {
        return PermissionDenied(
            "{}", refused(fmt::format("wrong cluster token from task {}", from_task)));
      }
      if (!assign.empty() && !IsTaskName(assign)) {
        return FailedPrecondition(
            "{}", refused(fmt::format("cannot take the name '{}': not /job:NAME/task:N", assign)));
      }
      if (task_.empty()) {
        if (assign.empty()) {
          return FailedPrecondition(
              "the process at {} has no task name yet; connect with one to assign it", address_);
        }
        task_ = assign;
        named = assign;
      }
      if (from_task == task_) {
        return FailedPrecondition("{}",
                                  refused(fmt::format("task {} connected to itself", from_task)));
      }
      peers_[from_task] = from;
      return task_;
    }();
    if (!named.empty()) Log(fmt::format("task {} named this process {}", from_task, named));
    return out;
  }

  std::vector<std::string> Peers() const DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    std::vector<std::string> out;
    for (const auto& [task, weak] : peers_) {
      if (!weak.expired()) out.push_back(task);
    }
    return out;
  }

  TransportStats Stats() const DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stats_;
  }

  // --- requests -------------------------------------------------------------------------------

  void SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods) {
    server_.SetHandler(std::move(handler), std::move(quick_methods));
  }

  void CallAsync(const std::string& task, uint16_t method, std::string payload,
                 std::chrono::milliseconds timeout, Reply done) DFLOW_EXCLUDES(mu_) {
    std::shared_ptr<Impl> peer;
    uint64_t id = 0;
    std::string me;
    {
      MutexLock lock(mu_);  // a Shutdown after this fails the call too
      if (auto it = peers_.find(task); it != peers_.end() && !closed_) peer = it->second.lock();
      if (peer != nullptr) {
        id = calls_.Add(task, nullptr, method, timeout, std::move(done));
        me = task_;
      }
    }
    if (peer == nullptr) {
      done(Unavailable("no connection to task {} for a request", task));
      return;
    }
    peer->Serve(weak_from_this(), me, method, std::move(payload), id);
  }

  // At the asked transport: runs the handler for a request (on the event thread for a quick
  // method, else on the call server's thread); its reply goes back to the caller's event thread.
  void Serve(std::weak_ptr<Impl> from, std::string from_task, uint16_t method, std::string payload,
             uint64_t id) {
    Reply reply = [from, id](Result<std::string> r) {
      if (auto caller = from.lock()) caller->Answer(id, std::move(r));
    };
    CallInfo call{std::move(from_task), method};
    if (!server_.IsQuick(method)) {
      server_.Serve(std::move(call), std::move(payload), std::move(reply));
      return;
    }
    events_->Post([self = shared_from_this(), call = std::move(call), payload = std::move(payload),
                   reply = std::move(reply)]() mutable {
      self->server_.Serve(std::move(call), std::move(payload), std::move(reply));
    });
  }

  // --- tensors --------------------------------------------------------------------------------

  void AttachStep(int64_t step) override DFLOW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    (void)boxes_.Get(step);
  }

  void ReleaseStep(int64_t step) override DFLOW_EXCLUDES(mu_) {
    const Status why = Cancelled("the rendezvous of step {} was destroyed", step);
    RendezvousTable<Tensor>::Drained drained;
    {
      MutexLock lock(mu_);
      if (auto box = boxes_.Finish(step)) drained = box->table.Abort(why);
    }
    for (auto& done : drained.waiting) done(why, Tensor());
  }

  void AbortStep(int64_t step, const Status& status, bool tell_peers) override DFLOW_EXCLUDES(mu_) {
    RendezvousTable<Tensor>::Drained drained;
    std::vector<std::shared_ptr<Impl>> peers;
    Status why;
    {
      MutexLock lock(mu_);
      auto box = boxes_.Get(step);
      if (box == nullptr || !box->table.aborted().ok()) return;
      drained = box->table.Abort(status.ok() ? Cancelled("step {} aborted", step) : status);
      why = box->table.aborted();
      if (tell_peers) {
        for (auto& [task, weak] : peers_) {
          if (auto p = weak.lock()) peers.push_back(std::move(p));
        }
      }
    }
    // The first error of the step, unchanged, so every task reports the same cause.
    for (auto& p : peers) {
      p->events_->Post([p, step, why] { p->AbortStep(step, why, false); });
    }
    for (auto& done : drained.waiting) done(why, Tensor());
  }

  Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) override
      DFLOW_EXCLUDES(mu_) {
    ASSIGN_OR_RETURN(std::string dst_task, TaskOfDevice(key.dst_device));
    std::optional<RendezvousTable<Tensor>::Waiting> waiting;
    std::shared_ptr<Impl> peer;
    std::string me;
    {
      MutexLock lock(mu_);
      me = task_;
      auto box = boxes_.Get(key.step_id);
      if (box == nullptr) {
        return FailedPrecondition("Send '{}': step {} has finished", args.node, key.step_id);
      }
      if (dst_task == me) {
        // Both ends in this task: hand the tensor over.
        Tensor arrival = tensor;
        ASSIGN_OR_RETURN(waiting, box->table.Arrive(key, args.node, arrival));
      } else {
        RETURN_IF_ERROR(box->NoteSent(key, args.node));
        if (auto it = peers_.find(dst_task); it != peers_.end()) peer = it->second.lock();
        if (peer == nullptr) {
          return Unavailable("Send '{}': no connection to task {}, the destination of {}",
                             args.node, dst_task, key.ToString());
        }
      }
    }
    if (dst_task == me) {
      if (waiting) DeliverToRecv(key, args.node, tensor, waiting->args, waiting->done);
      return Status::OK();
    }
    if (!tensor.host_accessible()) {
      return Unimplemented("Send '{}' of {} to task {}: this transport carries host memory, not {}",
                           args.node, key.ToString(), dst_task, tensor.device());
    }
    ASSIGN_OR_RETURN(Tensor copy, CopyToHost(tensor));
    {
      MutexLock lock(mu_);
      stats_.tensors_sent++;
      stats_.bytes_sent += copy.num_bytes();
    }
    peer->events_->Post([peer, key, node = std::string(args.node), copy, me] {
      peer->Arrive(key, node, copy, me);
    });
    return Status::OK();
  }

  void RecvAsync(const RendezvousKey& key, const RecvArgs& args,
                 Rendezvous::DoneCallback done) override DFLOW_EXCLUDES(mu_) {
    std::optional<RendezvousTable<Tensor>::Waiting> gone;  // taken back: its sender is gone
    auto arrived = [&]() -> Result<std::optional<RendezvousTable<Tensor>::Arrived>> {
      MutexLock lock(mu_);
      auto box = boxes_.Get(key.step_id);
      if (box == nullptr) {
        return FailedPrecondition("Recv '{}': step {} has finished", args.node, key.step_id);
      }
      ASSIGN_OR_RETURN(auto received, box->table.Receive(key, args, done));
      auto src = TaskOfDevice(key.src_device);
      if (!received && src.ok() && *src != task_ && !peers_.count(*src)) {
        gone = box->table.Cancel(key);
        return Unavailable("Recv '{}': no connection to task {}, the source of {}", args.node, *src,
                           key.ToString());
      }
      return received;
    }();
    if (gone) {
      gone->done(arrived.status(), Tensor());
    } else if (!arrived.ok()) {
      done(arrived.status(), Tensor());
    } else if (*arrived) {
      Deliver(key, (*arrived)->send_node, (*arrived)->value, args, done);
    }
  }

  void CancelRecv(const RendezvousKey& key, const Status& why) override DFLOW_EXCLUDES(mu_) {
    std::optional<RendezvousTable<Tensor>::Waiting> waiting;
    {
      MutexLock lock(mu_);
      if (auto box = boxes_.Find(key.step_id)) waiting = box->table.Cancel(key);
    }
    if (waiting) {
      waiting->done(why.ok() ? Cancelled("receive of {} cancelled", key.ToString()) : why,
                    Tensor());
    }
  }

  bool TakesDeviceMemory(const RendezvousKey& key) override {
    auto dst = TaskOfDevice(key.dst_device);
    return dst.ok() && *dst == task();
  }

 private:
  void Log(std::string_view line) { LogTransportLine(options_, task(), line); }

  // At the caller: the answer of call `id`, handed to its `done` on the event thread.
  void Answer(uint64_t id, Result<std::string> result) {
    auto self = shared_from_this();
    events_->Post([self, id, result = std::move(result)]() mutable {
      self->calls_.End(id, std::move(result));  // unless ended by its deadline or a lost peer
    });
  }

  // A peer's transport is gone: its calls fail, and so does every open step, here and in the
  // other tasks, since any may wait for it.
  void PeerLost(const std::string& task, const Status& why) DFLOW_EXCLUDES(mu_) {
    std::vector<int64_t> steps;
    {
      MutexLock lock(mu_);
      if (closed_ || peers_.erase(task) == 0) return;
      // The steps waiting for its tensors; a later Recv from it fails as it comes.
      steps = boxes_.StepsWaitingFor(task);
    }
    Log(why.message());
    auto self = shared_from_this();
    events_->Post([self, task, why, steps] {
      self->calls_.FailTask(task, why);
      for (int64_t step : steps) self->AbortStep(step, why, true);
    });
  }

  // A tensor from `from_task` reaches this task (event thread).
  void Arrive(const RendezvousKey& key, const std::string& send_node, const Tensor& tensor,
              const std::string& from_task) DFLOW_EXCLUDES(mu_) {
    std::optional<RendezvousTable<Tensor>::Waiting> waiting;
    std::string dropped;
    {
      MutexLock lock(mu_);
      auto box = boxes_.Get(key.step_id);
      if (box == nullptr || !box->table.aborted().ok()) {
        dropped = fmt::format("{} from task {}: its step is over here", key.ToString(), from_task);
      } else {
        Tensor arrival = tensor;
        auto arrived = box->table.Arrive(key, send_node, arrival);
        if (!arrived.ok()) {
          dropped = fmt::format("{} from task {}: sent twice", key.ToString(), from_task);
        } else {
          waiting = std::move(arrived).value();
          stats_.tensors_received++;
          stats_.bytes_received += tensor.num_bytes();
        }
      }
      if (!dropped.empty()) stats_.messages_dropped++;
    }
    if (!dropped.empty()) {
      Log(fmt::format("dropped {}", dropped));
      return;
    }
    if (waiting) Deliver(key, send_node, tensor, waiting->args, waiting->done);
  }

  // Hands a received tensor to its Recv, in the Recv's memory (under its device's limit).
  void Deliver(const RendezvousKey& key, std::string_view send_node, const Tensor& tensor,
               const RecvArgs& args, const Rendezvous::DoneCallback& done) {
    auto placed = IntoRecvMemory(key, args, tensor);
    if (!placed.ok()) {
      done(placed.status(), Tensor());  // the step fails, and its executor aborts it
      return;
    }
    DeliverToRecv(key, send_node, *placed, args, done);
  }

  const TransportOptions options_;
  std::string address_;  // listened on; empty: none
  std::unique_ptr<EventThread> events_;

  mutable Mutex mu_;
  std::string task_ DFLOW_GUARDED_BY(mu_);
  bool closed_ DFLOW_GUARDED_BY(mu_) = false;
  std::map<std::string, std::weak_ptr<Impl>> peers_ DFLOW_GUARDED_BY(mu_);
  StepBoxes<Tensor> boxes_ DFLOW_GUARDED_BY(mu_);
  TransportStats stats_ DFLOW_GUARDED_BY(mu_);

  PendingCalls calls_;  // this task's calls, their deadlines checked by the event thread
  CallServer server_{"dflow inproc svc", [this] { return task(); }};

 public:
  PendingCalls& calls() { return calls_; }
};

Result<std::unique_ptr<InprocTransport>> InprocTransport::Create(TransportOptions options) {
  RETURN_IF_ERROR(CheckTransportOptions(options));
  std::string address = options.listen_address;
  auto impl = std::make_shared<Impl>(std::move(options));
  if (!address.empty()) {
    Listeners& l = TheListeners();
    MutexLock lock(l.mu);
    if (address.size() >= 2 && address.compare(address.size() - 2, 2, ":0") == 0) {
      address = fmt::format("{}:{}", address.substr(0, address.size() - 2), l.next++);
    }
    auto [it, fresh] = l.by_address.try_emplace(address, impl);
    if (!fresh && !it->second.expired()) {
      return InvalidArgument("another transport of this process listens at {}", address);
    }
    it->second = impl;
  }
  RETURN_IF_ERROR(impl->Start(std::move(address)));
  return std::unique_ptr<InprocTransport>(new InprocTransport(std::move(impl)));
}

InprocTransport::InprocTransport(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
InprocTransport::~InprocTransport() { impl_->Shutdown(); }

std::string InprocTransport::task() const { return impl_->task(); }
uint64_t InprocTransport::incarnation() const { return ProcessIncarnation(); }
std::string InprocTransport::listen_address() const { return impl_->address(); }
Result<std::string> InprocTransport::Connect(const std::string& address,
                                             const std::string& assign) {
  return impl_->Connect(address, assign);
}
std::vector<std::string> InprocTransport::peers() const { return impl_->Peers(); }
TransportStats InprocTransport::stats() const { return impl_->Stats(); }
void InprocTransport::SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods) {
  impl_->SetCallHandler(std::move(handler), std::move(quick_methods));
}
void InprocTransport::SetReplyLimit(uint16_t method, uint64_t bytes) {
  impl_->calls().SetReplyLimit(method, bytes);
}

void InprocTransport::CallAsync(const std::string& task, uint16_t method, std::string payload,
                                std::chrono::milliseconds timeout, Reply done) {
  impl_->CallAsync(task, method, std::move(payload), timeout, std::move(done));
}
Result<std::unique_ptr<Rendezvous>> InprocTransport::Create(int64_t step_id) {
  return MakeStepRendezvous(impl_.get(), step_id);
}

Status RegisterInprocTransport(TransportRegistry& registry) {
  return registry.Register(
      "inproc",
      [](TransportOptions options) -> Result<std::unique_ptr<Transport>> {
        ASSIGN_OR_RETURN(auto t, InprocTransport::Create(std::move(options)));
        return std::unique_ptr<Transport>(std::move(t));
      },
      "inproc:local:0");
}

}  // namespace dflow::transport
