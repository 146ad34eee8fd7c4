// Tensors by reference between processes of one host (UcxTransportOptions::by_reference_bytes).
//
// UCX 1.13's shared memory under peer error handling has no single-copy lane (research notes:
// cma is dropped), so a large tensor is copied three times: into the shared segment in 8 KiB
// fragments, out of it into UCX's assembly buffer, and from there into the Recv's tensor. Open
// MPI moves such messages with one process_vm_readv. So do we: the sender keeps the tensor
// (held_) and sends only its header and address (TensorRef); the receiver, once a Recv wants
// the tensor, allocates it and copies it out of the sender's memory, then answers
// TensorRefDone and the sender lets it go. A peer's memory is tried once, when it connects
// (the SameHost probe): only a peer that read back the probe value says PeerReads and is sent
// references. A lost peer's held tensors are let go; a sender lost before the copy fails the
// receiving step (Unavailable, as a lost connection does).
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "framework/rendezvous_delivery.h"
#include "transport/ucx_impl.h"

namespace dflow::transport {
namespace {

// Copies `bytes` at `address` of process `pid` into `dst`: empty, or why not.
std::string ReadProcess(int pid, uint64_t address, void* dst, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return "the read returned no bytes";
    done += static_cast<size_t>(n);
  }
  return "";
}

}  // namespace

using namespace internal;

void UcxTransport::Impl::ProbePeer(Peer* peer, const SameHost& m) {
  if (m.pid == 0) return;  // not offered
  bool reads = false;
  if (options_.by_reference_bytes > 0) {
    uint64_t got = 0;
    std::string error = ReadProcess(static_cast<int>(m.pid), m.probe_address, &got, sizeof(got));
    reads = error.empty() && got == m.probe_value;
    if (!reads) {
      Log(fmt::format("tensors from task {} come through UCX: its memory cannot be read here ({})",
                      m.task, error.empty() ? "the probe read another value" : error));
    }
  }
  if (reads) {
    MutexLock lock(mu_);
    peer->pid = static_cast<int>(m.pid);
    stats_.readable_peers++;
  }
  deferred_.push_back(
      [this, peer, reads] { SendControl(peer, MessageType::kPeerReads, EncodePeerReads(reads)); });
}

ucs_status_t UcxTransport::Impl::OnPeerReads(void* arg, const void* header, size_t header_length,
                                             void*, size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from = self->ReadyTask(peer);
  if (from.empty()) return self->Drop("a PeerReads from an endpoint that did not shake hands");
  auto reads = DecodePeerReads({static_cast<const char*>(header), header_length});
  if (!reads.ok()) {
    return self->Drop(
        fmt::format("a malformed PeerReads from task {}: {}", from, reads.status().message()));
  }
  MutexLock lock(self->mu_);
  peer->reads_me = *reads;
  peer->awaiting_verdict = false;
  self->peers_changed_.NotifyAll();
  return UCS_OK;
}

ucs_status_t UcxTransport::Impl::OnTensorRefDone(void* arg, const void* header,
                                                 size_t header_length, void*, size_t,
                                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from = self->ReadyTask(peer);
  if (from.empty()) return self->Drop("a TensorRefDone from an endpoint that did not shake hands");
  auto m = DecodeTensorRefDone({static_cast<const char*>(header), header_length});
  if (!m.ok()) {
    return self->Drop(
        fmt::format("a malformed TensorRefDone from task {}: {}", from, m.status().message()));
  }
  std::vector<Tensor> freed;  // let go outside mu_
  MutexLock lock(self->mu_);
  for (uint64_t id : m->ids) {
    auto it = self->held_.find(id);
    if (it == self->held_.end() || it->second.peer != peer) continue;  // not the peer's
    freed.push_back(std::move(it->second.tensor));
    self->held_.erase(it);
  }
  lock.Unlock();
  return UCS_OK;
}

void UcxTransport::Impl::DropHeld(Peer* peer) {
  for (auto it = held_.begin(); it != held_.end();) {
    it = it->second.peer == peer ? held_.erase(it) : std::next(it);
  }
}

void UcxTransport::Impl::Release(std::vector<std::pair<Peer*, uint64_t>> refs) {
  if (refs.empty()) return;
  Post([this, refs = std::move(refs)] {
    std::unordered_map<Peer*, TensorRefDone> by_peer;
    for (const auto& [peer, id] : refs) {
      TensorRefDone& m = by_peer[peer];
      m.ids.push_back(id);
      if (m.ids.size() == kMaxRefsDone) {
        if (auto h = Encode(m); h.ok()) SendControl(peer, MessageType::kTensorRefDone, *h);
        m.ids.clear();
      }
    }
    for (const auto& [peer, m] : by_peer) {
      if (m.ids.empty()) continue;
      if (auto h = Encode(m); h.ok()) SendControl(peer, MessageType::kTensorRefDone, *h);
    }
  });
}

Status UcxTransport::Impl::CopyByReference(const Slot& slot, const RendezvousKey& key,
                                           std::string_view recv_node, Tensor* into) {
  // A sender that has lost this process (or ended) no longer holds the tensor: its memory may
  // hold something else by now, so nothing is read once the connection is known to be gone,
  // and what was read meanwhile is not delivered.
  auto connected = [&]()
                       DFLOW_REQUIRES(mu_) { return slot.ref_peer->state == Peer::State::kReady; };
  std::string error;
  {
    MutexLock lock(mu_);
    if (!connected()) error = "the connection to it is gone";
  }
  if (error.empty()) {
    error = ReadProcess(slot.ref_pid, slot.ref_address, into->raw_data(), slot.header.bytes);
  }
  MutexLock lock(mu_);
  if (error.empty() && !connected()) error = "the connection to it was lost during the copy";
  if (!error.empty()) {
    return Unavailable("copying {} of Send '{}' out of task {} for Recv '{}' failed: {}",
                       key.ToString(), slot.send_node, slot.from_task, recv_node, error);
  }
  stats_.tensors_received++;
  stats_.tensors_received_by_reference++;
  stats_.bytes_received += slot.header.bytes;
  return Status::OK();
}

ucs_status_t UcxTransport::Impl::OnTensorRef(void* arg, const void* header, size_t header_length,
                                             void*, size_t, const ucp_am_recv_param_t* param) {
  return static_cast<Impl*>(arg)->ReceiveTensorRef(
      {static_cast<const char*>(header), header_length}, param);
}

ucs_status_t UcxTransport::Impl::ReceiveTensorRef(std::string_view header,
                                                  const ucp_am_recv_param_t* param) {
  Peer* peer = PeerOf(param);
  std::string from_task;
  int pid = 0;
  {
    MutexLock lock(mu_);
    if (peer != nullptr && peer->state == Peer::State::kReady) {
      from_task = peer->task;
      pid = peer->pid;
    }
  }
  if (from_task.empty())
    return Drop("a tensor by reference from an endpoint that did not shake hands");
  auto decoded = DecodeTensorRef(header);
  if (!decoded.ok()) {
    // No id to answer: the sender holds the tensor until the connection ends.
    return Drop(fmt::format("a malformed tensor by reference from task {}: {}", from_task,
                            decoded.status().message()));
  }
  TensorHeader& h = decoded->tensor;
  // Every way out but a copy still to come tells the sender to let the tensor go.
  auto drop = [&](std::string why) {
    Release({{peer, decoded->id}});
    return Drop(why);
  };
  if (pid == 0) {
    return drop(fmt::format("a tensor by reference from task {}, whose memory is not readable here",
                            from_task));
  }
  auto dst_task = TaskOf(h.key.dst_device);
  if (!dst_task.ok() || *dst_task != task()) {
    return drop(fmt::format("a tensor from task {} for {}, not a device of this task", from_task,
                            h.key.ToString()));
  }
  Slot arrived;
  arrived.header = h;
  arrived.send_node = h.send_node;
  arrived.from_task = from_task;
  arrived.ref_peer = peer;
  arrived.ref_pid = pid;
  arrived.ref_address = decoded->address;
  arrived.ref_id = decoded->id;
  Rendezvous::DoneCallback done;
  RecvArgs recv;
  {
    MutexLock lock(mu_);
    std::shared_ptr<StepBox> box;
    std::string why;
    Slot* arrival = ArrivalSlot(h.key, from_task, &box, &why);
    if (arrival == nullptr) {
      lock.Unlock();
      return drop(why);
    }
    Slot& slot = *arrival;
    if (!slot.waiting) {
      arrived.arrived = true;
      slot = std::move(arrived);
      return UCS_OK;  // copied when a Recv asks (RecvAsync)
    }
    done = std::move(slot.waiting);
    recv = slot.recv;
    box->slots.erase(h.key);
  }
  // The Recv waits: copy into a buffer of its allocator now.
  TakeByReference(arrived, h.key, recv, done);
  return UCS_OK;
}

void UcxTransport::Impl::TakeByReference(const Slot& slot, const RendezvousKey& key,
                                         const RecvArgs& recv,
                                         const Rendezvous::DoneCallback& done) {
  Allocator* allocator = recv.allocator != nullptr ? recv.allocator : CpuAllocator::Default();
  auto t = Tensor::Allocate(allocator, slot.header.dtype, slot.header.shape);
  if (!t.ok() && allocator != CpuAllocator::Default()) {
    t = Tensor::Allocate(CpuAllocator::Default(), slot.header.dtype, slot.header.shape);
  }
  Status s = t.ok() ? CopyByReference(slot, key, recv.node, &*t) : t.status();
  Release({{slot.ref_peer, slot.ref_id}});
  if (!s.ok()) {
    done(s, Tensor());
    AbortStep(key.step_id, s, true);
    return;
  }
  DeliverToRecv(key, slot.send_node, *t, recv, done);
}

}  // namespace dflow::transport
