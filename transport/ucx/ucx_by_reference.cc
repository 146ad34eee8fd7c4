// Tensors by reference between processes of one host (UcxTransportOptions::by_reference_bytes).
//
// UCX 1.13's shared memory under peer error handling has no single-copy lane (research notes:
// cma is dropped), so a large tensor is copied three times: into the shared segment in 8 KiB
// fragments, out of it into UCX's assembly buffer, and from there into the Recv's tensor. So the
// sender keeps the tensor (held_) and sends only its header and where it lies (TensorRef); the
// receiver answers TensorRefDone once it no longer needs the sender's memory, and the sender
// lets the tensor go. Two ways to take it:
//   mapped  a worker's allocator makes large blocks memfds (CpuAllocator::set_shareable); the
//           receiver maps the sender's memfd (/proc/PID/fd/FD, once per file) and the Recv's
//           tensor is a read-only view of it (Tensor::Borrow): no copy at all, and the answer
//           goes when the view dies. A ring all-reduce adds straight out of its peer's memory.
//   copied  otherwise (the tensor is not in a memfd), once a Recv wants it, one
//           process_vm_readv copies it into the Recv's buffer, as Open MPI's CMA does.
// A peer's memory is tried once, when it connects (the SameHost probe: a word read by address
// and a memfd mapped); only a peer that managed one says so in PeerReads and is sent references
// that way. A lost peer's held tensors are let go, their memfds retired (freed, never reused, so
// a view that outlives the connection never sees other data); a sender lost before a copy fails
// the receiving step (Unavailable, as a lost connection does).
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "framework/peer_device_memory.h"
#include "framework/rendezvous_delivery.h"
#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

using namespace internal;

// A borrowed tensor's memory: the peer's memfd mapped here. Its death tells the peer.
class UcxEngine::BorrowedMemory final : public Allocator {
 public:
  BorrowedMemory(std::shared_ptr<Releaser> releaser, Peer* peer, uint64_t id,
                 std::shared_ptr<PeerMapping> mapping, std::string device)
      : releaser_(std::move(releaser)),
        peer_(peer),
        id_(id),
        mapping_(std::move(mapping)),
        device_(std::move(device)) {}
  void* Allocate(size_t, size_t) override { return nullptr; }
  void Deallocate(void*, size_t) override {
    MutexLock lock(releaser_->mu);
    if (releaser_->impl != nullptr) releaser_->impl->Release({{peer_, id_}});
  }
  const std::string& device() const override { return device_; }

 private:
  std::shared_ptr<Releaser> releaser_;
  Peer* peer_;
  uint64_t id_;
  std::shared_ptr<PeerMapping> mapping_;  // kept mapped while the tensor lives
  std::string device_;
};

void UcxEngine::MakeProbe() {
  probe_fd_ = memfd_create("dflow-probe", MFD_CLOEXEC);
  struct stat st {};
  if (probe_fd_ >= 0 &&
      (pwrite(probe_fd_, &probe_value_, sizeof(probe_value_), 0) != sizeof(probe_value_) ||
       fstat(probe_fd_, &st) != 0)) {
    close(probe_fd_);
    probe_fd_ = -1;
  }
  if (probe_fd_ >= 0) probe_inode_ = static_cast<uint64_t>(st.st_ino);
}

void UcxEngine::RetireHeld() {
  MutexLock lock(mu_);
  for (auto& [id, held] : held_) {
    if (held.shared) held.tensor.allocator()->Retire(held.tensor.raw_data());
  }
}

void UcxEngine::ProbePeer(Peer* peer, const SameHost& m) {
  if (m.pid == 0) return;  // not offered
  PeerReads verdict;
  if (options_.by_reference_bytes > 0) {
    uint64_t got = 0;
    std::string error = ReadProcess(static_cast<int>(m.pid), m.probe_address, &got, sizeof(got));
    verdict.reads = error.empty() && got == m.probe_value;
    std::string map_error = "none offered";
    if (m.probe_inode != 0) {
      void* p = MapProcessFile(static_cast<int>(m.pid), static_cast<int>(m.probe_fd), m.probe_inode,
                               sizeof(uint64_t), &map_error);
      if (p != nullptr) {
        std::memcpy(&got, p, sizeof(got));
        munmap(p, sizeof(uint64_t));
        verdict.maps = got == m.probe_value;
        if (!verdict.maps) map_error = "the probe read another value";
      }
    }
    if (!verdict.reads && !verdict.maps) {
      Log(fmt::format(
          "tensors from task {} come through UCX: its memory cannot be read here ({}) nor its "
          "memfds mapped ({})",
          m.task, error.empty() ? "the probe read another value" : error, map_error));
    }
  }
  if (verdict.reads || verdict.maps) {
    MutexLock lock(mu_);
    peer->pid = static_cast<int>(m.pid);
    peer->reads = verdict.reads;
    peer->maps = verdict.maps;
    if (verdict.reads) stats_.readable_peers++;
    if (verdict.maps) stats_.mappable_peers++;
  }
  deferred_.push_back(
      [this, peer, verdict] { SendControl(peer, MessageType::kPeerReads, Encode(verdict)); });
}

Result<Tensor> UcxEngine::Borrow(Peer* peer, int pid, const TensorRef& ref) {
  ASSIGN_OR_RETURN(std::shared_ptr<PeerMapping> mapping, mappings_.Map(pid, *ref.shared));
  void* data = static_cast<char*>(mapping->base) + ref.shared->offset;
  auto* owner =
      new BorrowedMemory(releaser_, peer, ref.id, std::move(mapping), ref.tensor.key.src_device);
  Tensor t = Tensor::Borrow(owner, data, ref.tensor.dtype, ref.tensor.shape);
  owner->Unref();  // the tensor's buffer holds it
  return t;
}

ucs_status_t UcxEngine::OnPeerReads(void* arg, const void* header, size_t header_length, void*,
                                    size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from = self->ReadyTask(peer);
  if (from.empty()) return self->Drop("a PeerReads from an endpoint that did not shake hands");
  auto reads = DecodePeerReads({static_cast<const char*>(header), header_length});
  if (!reads.ok()) {
    return self->Drop(
        fmt::format("a malformed PeerReads from task {}: {}", from, reads.status().message()));
  }
  MutexLock lock(self->mu_);
  peer->reads_me = reads->reads;
  peer->maps_me = reads->maps;
  peer->awaiting_verdict = false;
  self->peers_changed_.NotifyAll();
  return UCS_OK;
}

ucs_status_t UcxEngine::OnTensorRefDone(void* arg, const void* header, size_t header_length, void*,
                                        size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
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

void UcxEngine::DropHeld(Peer* peer) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.peer != peer) {
      ++it;
      continue;
    }
    // The peer may live on and still read the memfd: it must never hold other data.
    const Tensor& t = it->second.tensor;
    if (it->second.shared) t.allocator()->Retire(t.raw_data());
    it = held_.erase(it);
  }
}

void UcxEngine::Release(std::vector<std::pair<Peer*, uint64_t>> refs) {
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
    // Each id's hold (OnTensorRef, OnDeviceTensorRef), now that its answer is on its way.
    for (const auto& [peer, id] : refs) peer->holds--;
  });
}

Status UcxEngine::CopyByReference(const Arrival& slot, const std::string& send_node,
                                  const RendezvousKey& key, std::string_view recv_node,
                                  Tensor* into) {
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
                       key.ToString(), send_node, slot.from_task, recv_node, error);
  }
  stats_.tensors_received++;
  stats_.tensors_received_by_reference++;
  stats_.bytes_received += slot.header.bytes;
  return Status::OK();
}

ucs_status_t UcxEngine::OnTensorRef(void* arg, const void* header, size_t header_length, void*,
                                    size_t, const ucp_am_recv_param_t* param) {
  return static_cast<UcxEngine*>(arg)->ReceiveTensorRef(
      {static_cast<const char*>(header), header_length}, param);
}

ucs_status_t UcxEngine::ReceiveTensorRef(std::string_view header,
                                         const ucp_am_recv_param_t* param) {
  Peer* peer = PeerOf(param);
  std::string from_task;
  int pid = 0;
  bool reads = false, maps = false;
  {
    MutexLock lock(mu_);
    if (peer != nullptr && peer->state == Peer::State::kReady) {
      from_task = peer->task;
      pid = peer->pid;
      reads = peer->reads;
      maps = peer->maps;
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
  peer->holds++;  // until the one Release of this id
  // Every way out but a copy still to come tells the sender to let the tensor go.
  auto drop = [&](std::string why) {
    Release({{peer, decoded->id}});
    return Drop(why);
  };
  const bool mapped = decoded->shared.has_value() && maps;
  if (!mapped && !reads) {
    return drop(fmt::format("a tensor by reference from task {}, whose memory is not {} here",
                            from_task, decoded->shared ? "mapped or read" : "readable"));
  }
  auto dst_task = TaskOf(h.key.dst_device);
  if (!dst_task.ok() || *dst_task != task()) {
    return drop(fmt::format("a tensor from task {} for {}, not a device of this task", from_task,
                            h.key.ToString()));
  }
  if (mapped) {
    auto borrowed = Borrow(peer, pid, *decoded);
    if (borrowed.ok()) return ArriveBorrowed(h, from_task, std::move(borrowed).value());
    if (!reads) {
      Status s = Unavailable("mapping {} of Send '{}' out of task {} failed: {}", h.key.ToString(),
                             h.send_node, from_task, borrowed.status().message());
      Release({{peer, decoded->id}});
      AbortStep(h.key.step_id, s, true);
      return UCS_OK;
    }
    Log(fmt::format("{} of Send '{}' is copied out of task {}: mapping it failed: {}",
                    h.key.ToString(), h.send_node, from_task, borrowed.status().message()));
  }
  Arrival arrived;
  arrived.header = h;
  arrived.from_task = from_task;
  arrived.ref_peer = peer;
  arrived.ref_pid = pid;
  arrived.ref_address = decoded->address;
  arrived.ref_id = decoded->id;
  std::optional<Table::Waiting> waiting;
  std::string why;
  if (!Arrive(h.key, h.send_node, arrived, &waiting, &why)) return drop(why);
  // The Recv waits: copy into a buffer of its allocator now (otherwise when it asks).
  if (waiting) TakeByReference(arrived, h.send_node, h.key, waiting->args, waiting->done);
  return UCS_OK;
}

bool UcxEngine::TakesDeviceMemory(const RendezvousKey& key) {
  auto dst_task = TaskOf(key.dst_device);
  if (!dst_task.ok()) return false;
  if (*dst_task == task()) return true;
  MutexLock lock(mu_);
  Peer* peer = ReadyPeer(*dst_task);
  return peer != nullptr && (peer->reads_me || peer->maps_me);
}

ucs_status_t UcxEngine::OnDeviceTensorRef(void* arg, const void* header, size_t header_length,
                                          void*, size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from_task = self->ReadyTask(peer);
  if (from_task.empty()) {
    return self->Drop("a tensor in device memory from an endpoint that did not shake hands");
  }
  auto decoded = DecodeDeviceTensorRef({static_cast<const char*>(header), header_length});
  if (!decoded.ok()) {
    return self->Drop(fmt::format("a malformed tensor in device memory from task {}: {}", from_task,
                                  decoded.status().message()));
  }
  const TensorHeader& h = decoded->tensor;
  peer->holds++;  // until the one Release of this id
  auto dst_task = self->TaskOf(h.key.dst_device);
  if (!dst_task.ok() || *dst_task != self->task()) {
    self->Release({{peer, decoded->id}});
    return self->Drop(fmt::format("a tensor from task {} for {}, not a device of this task",
                                  from_task, h.key.ToString()));
  }
  // The Recv's device copies it in; when the tensor goes, so does the sender's hold on it.
  auto* owner = new PeerDeviceMemory(h.key.src_device, std::move(decoded->handle),
                                     [releaser = self->releaser_, peer, id = decoded->id] {
                                       MutexLock lock(releaser->mu);
                                       if (releaser->impl != nullptr)
                                         releaser->impl->Release({{peer, id}});
                                     });
  Tensor t = Tensor::Borrow(owner, nullptr, h.dtype, h.shape);
  owner->Unref();  // the tensor's buffer holds it
  return self->ArriveBorrowed(h, from_task, std::move(t));
}

ucs_status_t UcxEngine::ArriveBorrowed(const TensorHeader& h, const std::string& from_task,
                                       Tensor tensor) {
  Arrival arrived{.tensor = tensor, .from_task = from_task};
  std::optional<Table::Waiting> waiting;
  std::string why;
  // Dropped, the tensor's death tells the sender.
  if (!Arrive(h.key, h.send_node, arrived, &waiting, &why)) return Drop(why);
  {
    MutexLock lock(mu_);
    stats_.tensors_received++;
    stats_.tensors_received_by_reference++;
    stats_.tensors_received_mapped++;
    stats_.bytes_received += h.bytes;
  }
  if (waiting) DeliverToRecv(h.key, h.send_node, tensor, waiting->args, waiting->done);
  return UCS_OK;
}

void UcxEngine::TakeByReference(const Arrival& slot, const std::string& send_node,
                                const RendezvousKey& key, const RecvArgs& recv,
                                const Rendezvous::DoneCallback& done) {
  auto t = AllocateForRecv(key, recv, slot.header.dtype, slot.header.shape);
  Status s = t.ok() ? CopyByReference(slot, send_node, key, recv.node, &*t) : t.status();
  Release({{slot.ref_peer, slot.ref_id}});
  if (!s.ok()) {
    done(s, Tensor());
    AbortStep(key.step_id, s, true);
    return;
  }
  DeliverToRecv(key, send_node, *t, recv, done);
}

}  // namespace dflow::transport
