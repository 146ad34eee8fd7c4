// Tensors between tasks: Send/Recv through per-step boxes (ucx_impl.h).
#include <fmt/format.h>

#include <cstring>
#include <optional>

#include "framework/rendezvous_delivery.h"
#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {
using namespace internal;

// --- sending ----------------------------------------------------------------------------------

namespace {
// A tensor message without its bytes: the receiver reads them where they lie.
bool ByReference(MessageType t) {
  return t == MessageType::kTensorRef || t == MessageType::kDeviceTensorRef;
}
}  // namespace

std::string UcxEngine::SendOp::What() const {
  if (type == MessageType::kDeviceTensorRef) {
    auto r = DecodeDeviceTensorRef(header);
    if (!r.ok()) return "a tensor";
    return fmt::format("{} of Send '{}'", r->tensor.key.ToString(), r->tensor.send_node);
  }
  if (type == MessageType::kTensorRef) {
    auto r = DecodeTensorRef(header);
    if (!r.ok()) return "a tensor";
    return fmt::format("{} of Send '{}'", r->tensor.key.ToString(), r->tensor.send_node);
  }
  if (type != MessageType::kTensor) return what;
  auto h = DecodeTensorHeader(header);
  if (!h.ok()) return "a tensor";
  return fmt::format("{} of Send '{}'", h->key.ToString(), h->send_node);
}

void UcxEngine::SendControl(Peer* peer, MessageType type, std::string header) {
  auto* op = new SendOp;
  op->impl = this;
  op->peer = peer;
  op->type = type;
  op->header = std::move(header);
  op->what = fmt::format("a control message ({})", static_cast<int>(type));
  peer->sends++;  // FinishSend takes it back
  StartSend(op);
}

void UcxEngine::StartSend(SendOp* op) {
  if (op->peer->ep == nullptr) {
    FinishSend(op, UCS_ERR_NOT_CONNECTED);
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = &SendDone;
  param.user_data = op;
  // A tensor by reference sends its header alone.
  size_t bytes = ByReference(op->type)                   ? 0
                 : op->tensor.dtype() == DType::kInvalid ? op->bytes.size()
                                                         : op->tensor.num_bytes();
  const void* payload = bytes == 0 ? nullptr
                                   : (op->tensor.dtype() == DType::kInvalid
                                          ? static_cast<const void*>(op->bytes.data())
                                          : op->tensor.raw_data());
  void* r = ucp_am_send_nbx(op->peer->ep, static_cast<unsigned>(op->type), op->header.data(),
                            op->header.size(), payload, bytes, &param);
  if (r == nullptr) {
    FinishSend(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(r)) {
    FinishSend(op, UCS_PTR_STATUS(r));
  }
}

void UcxEngine::SendDone(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  op->impl->FinishSend(op, status);
  ucp_request_free(request);
}

void UcxEngine::FinishSend(SendOp* op, ucs_status_t status) {
  std::unique_ptr<SendOp> owned(op);
  op->peer->sends--;
  if (op->type == MessageType::kHello && status != UCS_OK) {
    PeerFailed(op->peer, status);  // Connect learns it at once
  }
  if (op->type == MessageType::kCallRequest && status != UCS_OK) {
    calls_.End(op->call_id,
               Unavailable("sending request {} failed: {}", op->what, ucs_status_string(status)));
  }
  if (op->type == MessageType::kTensor || ByReference(op->type)) {
    const bool by_reference = ByReference(op->type);
    if (status == UCS_OK) {
      MutexLock lock(mu_);
      stats_.tensors_sent++;
      stats_.bytes_sent += op->tensor.num_bytes();
      if (by_reference) stats_.tensors_sent_by_reference++;
      if (op->mapped) stats_.tensors_sent_mapped++;
    } else {
      std::string task;
      Tensor unheld;  // let go outside mu_
      {
        MutexLock lock(mu_);
        task = op->peer->task;
        if (auto it = held_.find(op->ref_id); by_reference && it != held_.end()) {
          // Perhaps it arrived all the same: a mapped memfd must never hold other data.
          unheld = std::move(it->second.tensor);
          if (it->second.shared) unheld.allocator()->Retire(unheld.raw_data());
          held_.erase(it);
        }
      }
      AbortStep(op->step,
                Unavailable("sending {} to task {} failed: {}", op->What(), task,
                            ucs_status_string(status)),
                true);
    }
  }
}

Status UcxEngine::Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) {
  ASSIGN_OR_RETURN(std::string dst_task, TaskOf(key.dst_device));
  if (dst_task == task()) {
    // Both ends in this process: hand the tensor over.
    std::optional<Table::Waiting> waiting;
    {
      MutexLock lock(mu_);
      std::shared_ptr<StepBox> box = boxes_.Get(key.step_id);
      if (box == nullptr) {
        return FailedPrecondition("Send '{}': step {} has finished", args.node, key.step_id);
      }
      Arrival arrival{.tensor = tensor, .from_task = dst_task};
      ASSIGN_OR_RETURN(waiting, box->table.Arrive(key, args.node, arrival));
    }
    if (waiting) DeliverToRecv(key, args.node, tensor, waiting->args, waiting->done);
    return Status::OK();
  }
  // Device memory goes by a handle the receiver opens (CUDA IPC), when the Send found the
  // receiver of this host (TakesDeviceMemory); elsewhere it comes as a host copy.
  std::string device_handle;
  if (!tensor.host_accessible()) {
    auto exported = tensor.allocator()->ExportToPeer(tensor.raw_data(), tensor.num_bytes());
    if (!exported.ok()) {
      return Status(exported.status().code(),
                    fmt::format("Send '{}' of {} to task {}: {}", args.node, key.ToString(),
                                dst_task, exported.status().message()));
    }
    device_handle = std::move(exported).value();
  }
  TensorHeader h;
  h.key = key;
  h.send_node = args.node;
  h.dtype = tensor.dtype();
  h.shape = tensor.shape();
  h.bytes = tensor.num_bytes();
  ASSIGN_OR_RETURN(std::string header, Encode(h));
  // Big enough to go by reference, should the peer read this process's memory or map the
  // memfd the tensor lies in.
  const bool big = device_handle.empty() && options_.by_reference_bytes > 0 &&
                   h.bytes >= options_.by_reference_bytes;
  std::optional<SharedRegion> shared;
  if (big && tensor.allocator() != nullptr)
    shared = tensor.allocator()->FindShared(tensor.raw_data());
  auto* op = new SendOp;
  op->impl = this;
  op->type = MessageType::kTensor;
  op->header = std::move(header);
  op->tensor = tensor;
  op->step = key.step_id;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box = boxes_.Get(key.step_id);
    Status refused;
    if (box == nullptr) {
      refused = FailedPrecondition("Send '{}': step {} has finished", args.node, key.step_id);
    } else if (Status noted = box->NoteSent(key, args.node); !noted.ok()) {
      refused = noted;
    } else if ((op->peer = ReadyPeer(dst_task)) == nullptr) {
      refused = Unavailable("Send '{}': no connection to task {}, the destination of {}", args.node,
                            dst_task, key.ToString());
    } else if (!device_handle.empty()) {
      const uint64_t id = next_ref_id_++;
      auto ref = Encode(DeviceTensorRef{h, id, std::move(device_handle)});
      if (ref.ok()) {
        held_[id] = {tensor, op->peer, false};
        op->type = MessageType::kDeviceTensorRef;
        op->header = std::move(ref).value();
        op->ref_id = id;
      } else {
        refused = ref.status();
      }
    } else if (big && (op->peer->reads_me || (shared && op->peer->maps_me))) {
      if (!op->peer->maps_me) shared.reset();
      const uint64_t id = next_ref_id_++;
      // Only a header at the very limit fails: it then goes with its bytes.
      if (auto ref =
              AsTensorRef(op->header, reinterpret_cast<uintptr_t>(tensor.raw_data()), id, shared);
          ref.ok()) {
        held_[id] = {tensor, op->peer, shared.has_value()};
        op->mapped = shared.has_value();
        op->type = MessageType::kTensorRef;
        op->header = std::move(ref).value();
        op->ref_id = id;
      }
    }
    if (!refused.ok()) {
      delete op;
      return refused;
    }
    op->peer->sends++;  // FinishSend takes it back
  }
  Post([this, op] { StartSend(op); });
  return Status::OK();
}

// --- receiving --------------------------------------------------------------------------------

ucs_status_t UcxEngine::Drop(std::string_view why) {
  {
    MutexLock lock(mu_);
    stats_.messages_dropped++;
  }
  Log(fmt::format("dropped {}", why));
  // For a rendezvous message, UCS_OK drops the data too (the sender completes normally).
  return UCS_OK;
}

ucs_status_t UcxEngine::OnTensor(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxEngine*>(arg)->ReceiveTensor(
      {static_cast<const char*>(header), header_length}, data, length, param);
}

ucs_status_t UcxEngine::ReceiveTensor(std::string_view header, void* data, size_t length,
                                      const ucp_am_recv_param_t* param) {
  Peer* peer = PeerOf(param);
  std::string from_task;
  {
    MutexLock lock(mu_);
    if (peer != nullptr && peer->state == Peer::State::kReady) from_task = peer->task;
  }
  if (from_task.empty()) return Drop("a tensor from an endpoint that did not shake hands");
  auto decoded = DecodeTensorHeader(header);
  if (!decoded.ok()) {
    return Drop(fmt::format("a malformed tensor message from task {}: {}", from_task,
                            decoded.status().message()));
  }
  TensorHeader& h = *decoded;
  if (length != h.bytes) {
    return Drop(fmt::format("a tensor message from task {} for {}: {} bytes came for {}", from_task,
                            h.key.ToString(), length, h.bytes));
  }
  auto dst_task = TaskOf(h.key.dst_device);
  if (!dst_task.ok() || *dst_task != task()) {
    return Drop(fmt::format("a tensor from task {} for {}, not a device of this task", from_task,
                            h.key.ToString()));
  }
  bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  std::optional<Table::Waiting> waiting;
  Tensor tensor;
  RecvOp* pull = nullptr;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box;
    std::string why;
    if (rndv) {
      Arrival arrival{.desc = data, .header = h, .from_task = from_task};
      if (!ArriveUnderLock(h.key, h.send_node, arrival, &waiting, &box, &why)) {
        lock.Unlock();
        return Drop(why);
      }
      if (!waiting) return UCS_INPROGRESS;  // parked: pulled when its Recv comes
      // The Recv waits: pull straight into a buffer of its allocator.
      pull = new RecvOp;
      pull->impl = this;
      pull->box = box;
      pull->key = h.key;
      pull->send_node = h.send_node;
      pull->from_task = from_task;
      pull->recv = std::move(waiting->args);
      pull->done = std::move(waiting->done);
    } else {
      // Into the waiting Recv's memory when one waits (under its device's limit), host memory
      // otherwise (moved into the Recv's when it comes: IntoRecvMemory).
      box = boxes_.Get(h.key.step_id);
      const RecvArgs* recv = box == nullptr ? nullptr : box->table.WaitingFor(h.key);
      auto t = recv != nullptr ? AllocateForRecv(h.key, *recv, h.dtype, h.shape)
                               : Tensor::Allocate(CpuAllocator::Default(), h.dtype, h.shape);
      if (!t.ok()) {
        Status s = t.status();
        lock.Unlock();
        AbortStep(h.key.step_id, s, true);
        return UCS_OK;
      }
      tensor = std::move(t).value();
      if (length > 0) std::memcpy(tensor.raw_data(), data, length);
      Arrival arrival{.tensor = tensor, .from_task = from_task};
      if (!ArriveUnderLock(h.key, h.send_node, arrival, &waiting, &box, &why)) {
        lock.Unlock();
        return Drop(why);
      }
      stats_.tensors_received++;
      stats_.bytes_received += length;
    }
  }
  if (pull != nullptr) {
    auto t = AllocateForRecv(h.key, pull->recv, h.dtype, h.shape);
    if (!t.ok()) {
      pull->done(t.status(), Tensor());
      delete pull;
      return UCS_OK;  // drops the data; the sender completes
    }
    pull->tensor = std::move(t).value();
    deferred_.push_back([this, pull, data, length] { StartRecv(pull, data, length); });
    return UCS_INPROGRESS;
  }
  if (waiting) DeliverToRecv(h.key, h.send_node, tensor, waiting->args, waiting->done);
  return UCS_OK;
}

bool UcxEngine::ArriveUnderLock(const RendezvousKey& key, const std::string& send_node,
                                Arrival& arrival, std::optional<Table::Waiting>* waiting,
                                std::shared_ptr<StepBox>* box, std::string* why) {
  *box = boxes_.Get(key.step_id);
  if (*box == nullptr || !(*box)->table.aborted().ok()) {
    *why = fmt::format("{} from task {}: its step is over here", key.ToString(), arrival.from_task);
    return false;
  }
  auto arrived = (*box)->table.Arrive(key, send_node, arrival);
  if (!arrived.ok()) {
    *why = fmt::format("{} from task {}: sent twice", key.ToString(), arrival.from_task);
    return false;
  }
  *waiting = std::move(arrived).value();
  return true;
}

bool UcxEngine::Arrive(const RendezvousKey& key, const std::string& send_node, Arrival& arrival,
                       std::optional<Table::Waiting>* waiting, std::string* why) {
  MutexLock lock(mu_);
  std::shared_ptr<StepBox> box;
  return ArriveUnderLock(key, send_node, arrival, waiting, &box, why);
}

ucs_status_t UcxEngine::Pull(void* desc, void* buffer, size_t length,
                             ucp_am_recv_data_nbx_callback_t done, void* user_data) {
  // Counted in pulling_bytes_ until done (CheckPeers allows for them).
  struct Counted {
    UcxEngine* impl;
    size_t length;
    ucp_am_recv_data_nbx_callback_t done;
    void* user_data;
  };
  auto* counted = new Counted{this, length, done, user_data};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv_am = [](void* request, ucs_status_t status, size_t got, void* arg) {
    std::unique_ptr<Counted> c(static_cast<Counted*>(arg));
    c->impl->pulling_bytes_ -= c->length;
    c->done(request, status, got, c->user_data);
  };
  param.user_data = counted;
  void* r = ucp_am_recv_data_nbx(worker_, desc, buffer, length, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete counted;
    return r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
  }
  pulling_bytes_ += length;
  return UCS_INPROGRESS;
}

void UcxEngine::StartRecv(RecvOp* op, void* desc, size_t length) {
  ucs_status_t s = Pull(desc, op->tensor.raw_data(), length, &RecvDone, op);
  if (s != UCS_INPROGRESS) FinishRecv(op, s);
}

void UcxEngine::RecvDone(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* op = static_cast<RecvOp*>(user_data);
  op->impl->FinishRecv(op, status);
  ucp_request_free(request);
}

void UcxEngine::FinishRecv(RecvOp* op, ucs_status_t status) {
  std::unique_ptr<RecvOp> owned(op);
  Status aborted;
  {
    MutexLock lock(mu_);
    aborted = op->box->table.aborted();
    if (status == UCS_OK) {
      stats_.tensors_received++;
      stats_.bytes_received += op->tensor.num_bytes();
    }
  }
  if (status != UCS_OK) {
    Status s = Unavailable("receiving {} from task {} for Recv '{}' failed: {}", op->key.ToString(),
                           op->from_task, op->recv.node, ucs_status_string(status));
    op->done(s, Tensor());
    AbortStep(op->key.step_id, s, true);
    return;
  }
  if (!aborted.ok()) {
    op->done(aborted, Tensor());
    return;
  }
  DeliverToRecv(op->key, op->send_node, op->tensor, op->recv, op->done);
}

void UcxEngine::RecvAsync(const RendezvousKey& key, const RecvArgs& args,
                          Rendezvous::DoneCallback done) {
  Status failed;
  std::optional<Table::Waiting> gone;  // taken back: its sender is gone
  std::optional<Table::Arrived> arrived;
  RecvOp* pull = nullptr;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box = boxes_.Get(key.step_id);
    if (box == nullptr) {
      failed = FailedPrecondition("Recv '{}': step {} has finished", args.node, key.step_id);
    } else {
      auto received = box->table.Receive(key, args, done);
      if (!received.ok()) {
        failed = received.status();
      } else if (!*received) {
        // Waits for its tensor, unless its sender is gone: then nothing would come.
        auto src = TaskOf(key.src_device);
        if (!src.ok() || *src == task_ || ReadyPeer(*src) != nullptr) return;
        gone = box->table.Cancel(key);
        failed = Unavailable("Recv '{}': no connection to task {}, the source of {}", args.node,
                             *src, key.ToString());
      } else {
        arrived = std::move(*received);
        const Arrival& a = arrived->value;
        if (a.desc != nullptr && a.ref_peer == nullptr) {
          auto t = AllocateForRecv(key, args, a.header.dtype, a.header.shape);
          if (!t.ok()) {
            failed = t.status();
          } else {
            pull = new RecvOp;
            pull->impl = this;
            pull->box = box;
            pull->key = key;
            pull->send_node = arrived->send_node;
            pull->from_task = a.from_task;
            pull->recv = args;
            pull->done = std::move(done);
            pull->tensor = std::move(t).value();
          }
        }
      }
    }
  }
  if (pull != nullptr) {
    Post([this, pull, desc = arrived->value.desc, length = arrived->value.header.bytes] {
      StartRecv(pull, desc, length);
    });
    return;
  }
  if (arrived && arrived->value.ref_peer != nullptr) {
    // Copied on the progress thread, not this one: the step's thread goes on to what is ready
    // beside the Recv (in a ring all-reduce, the pieces the peer waits for) instead of copying
    // first.
    Post([this, arrived = std::move(*arrived), key, args, done = std::move(done)] {
      TakeByReference(arrived.value, arrived.send_node, key, args, done);
    });
    return;
  }
  if (arrived && arrived->value.desc != nullptr) {
    Post([this, desc = arrived->value.desc] { ReleaseDesc(desc); });  // its allocation failed
  }
  if (gone) {
    gone->done(failed, Tensor());
    return;
  }
  if (!failed.ok()) {
    done(failed, Tensor());
    return;
  }
  // It came before its Recv, into host memory: now in the Recv's, under its device's limit.
  auto placed = IntoRecvMemory(key, args, arrived->value.tensor);
  if (!placed.ok()) {
    done(placed.status(), Tensor());  // the step fails, and its executor aborts it
    return;
  }
  DeliverToRecv(key, arrived->send_node, *placed, args, done);
}

void UcxEngine::CancelRecv(const RendezvousKey& key, const Status& why) {
  std::optional<Table::Waiting> waiting;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box = boxes_.Find(key.step_id);
    if (box == nullptr) return;
    waiting = box->table.Cancel(key);
  }
  if (waiting) {
    waiting->done(why.ok() ? Cancelled("receive of {} cancelled", key.ToString()) : why, Tensor());
  }
}

void UcxEngine::LetGo(std::vector<Arrival> arrivals) {
  std::vector<void*> descs;
  std::vector<std::pair<Peer*, uint64_t>> refs;
  for (const Arrival& a : arrivals) {
    if (a.ref_peer != nullptr) {
      refs.emplace_back(a.ref_peer, a.ref_id);
    } else if (a.desc != nullptr) {
      descs.push_back(a.desc);
    }
  }
  if (!descs.empty()) {
    Post([this, descs] {
      for (void* d : descs) ReleaseDesc(d);
    });
  }
  Release(std::move(refs));
}

void UcxEngine::AbortStep(int64_t step, const Status& status, bool tell_peers) {
  Table::Drained drained;
  std::vector<Peer*> peers;
  Status why;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box = boxes_.Get(step);
    if (box == nullptr || !box->table.aborted().ok()) return;
    drained = box->table.Abort(status.ok() ? Cancelled("step {} aborted", step) : status);
    why = box->table.aborted();
    if (tell_peers) {
      for (auto& [task, peer] : peer_of_task_) {
        if (peer->state == Peer::State::kReady) peers.push_back(peer);
      }
    }
  }
  LetGo(std::move(drained.arrived));
  if (!peers.empty()) {
    transport::AbortStep m;
    m.step_id = step;
    m.status = why;
    auto header = Encode(m);
    if (header.ok()) {
      Post([this, peers, h = std::move(header).value()] {
        for (Peer* p : peers) SendControl(p, MessageType::kAbortStep, h);
      });
    }
  }
  for (auto& done : drained.waiting) done(why, Tensor());
}

ucs_status_t UcxEngine::OnAbortStep(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from = self->ReadyTask(peer);
  if (from.empty()) return self->Drop("an abort from an endpoint that did not shake hands");
  auto m = DecodeAbortStep({static_cast<const char*>(header), header_length});
  if (!m.ok()) {
    return self->Drop(
        fmt::format("a malformed abort from task {}: {}", from, m.status().message()));
  }
  // The first error of the step, unchanged, so every task reports the same cause.
  self->AbortStep(m->step_id, m->status, false);
  return UCS_OK;
}

void UcxEngine::AttachStep(int64_t step) {
  MutexLock lock(mu_);
  (void)boxes_.Get(step);
}

void UcxEngine::ReleaseStep(int64_t step) {
  Table::Drained drained;
  const Status why = Cancelled("the rendezvous of step {} was destroyed", step);
  {
    MutexLock lock(mu_);
    if (std::shared_ptr<StepBox> box = boxes_.Finish(step)) drained = box->table.Abort(why);
  }
  LetGo(std::move(drained.arrived));
  for (auto& done : drained.waiting) done(why, Tensor());
}

}  // namespace dflow::transport
