#include "ops/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "framework/peer_device_memory.h"
#include "ops/cuda/cuda_call.h"
#include "ops/cuda/cuda_ipc.h"
#include "ops/cuda/cuda_node_timer.h"

namespace dflow {

// The context kernels see: the stream, and the device's copies.
class CudaDeviceContext final : public CudaContext {
 public:
  explicit CudaDeviceContext(CudaDevice* device)
      : CudaContext(device->ordinal(), device->stream()), device_(device) {}
  Result<Tensor> CopyToHost(const Tensor& tensor) override { return device_->CopyToHost(tensor); }
  Result<Tensor> CopyFromHost(const Tensor& host) override { return device_->CopyFromHost(host); }
  Status CopyOnDevice(const Tensor& src, Tensor& dst) override {
    return device_->CopyOnDevice(src, dst);
  }
  Result<Tensor> SendView(const Tensor& tensor) override { return device_->SendView(tensor); }
  Result<Tensor> CopyFromDevice(const Tensor& sent) override {
    return device_->CopyFromDevice(sent);
  }

 private:
  CudaDevice* device_;
};

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) {
      *why = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    cudaGetLastError();  // not sticky: clear it for later calls
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount: no CUDA device";
  return n;
}

CudaAllocator::CudaAllocator(std::string device, int ordinal, CudaStream stream, size_t limit)
    : device_(std::move(device)), ordinal_(ordinal), stream_(stream), limit_(limit) {}

CudaAllocator::~CudaAllocator() {
  OnDevice(ordinal_, [&] {
    cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_));
    return cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
  });
}

namespace {
// The allocator whose allocations this thread orders on another stream, and that stream.
thread_local const CudaAllocator* ordered_owner = nullptr;
thread_local CudaStream ordered_stream = nullptr;
}  // namespace

CudaAllocator::OrderedOn::OrderedOn(CudaAllocator* allocator, CudaStream stream)
    : before_owner_(ordered_owner), before_stream_(ordered_stream) {
  ordered_owner = allocator;
  ordered_stream = stream;
}

CudaAllocator::OrderedOn::~OrderedOn() {
  ordered_owner = before_owner_;
  ordered_stream = before_stream_;
}

void* CudaAllocator::Allocate(size_t bytes, size_t alignment) {
  // The pool's blocks are aligned to 256 bytes at least, which covers every dtype and vector
  // load; a larger alignment is not offered.
  if (alignment > 256) return nullptr;
  const size_t size = bytes == 0 ? 1 : bytes;
  size_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && used + size > limit_) return nullptr;
  } while (!in_use_.compare_exchange_weak(used, used + size, std::memory_order_relaxed));
  void* p = nullptr;
  const CudaStream on = ordered_owner == this ? ordered_stream : stream_;
  cudaError_t e = OnDevice(
      ordinal_, [&] { return cudaMallocAsync(&p, size, reinterpret_cast<cudaStream_t>(on)); });
  if (e != cudaSuccess) {
    cudaGetLastError();
    in_use_.fetch_sub(size, std::memory_order_relaxed);
    return nullptr;
  }
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (used + size > peak &&
         !peak_.compare_exchange_weak(peak, used + size, std::memory_order_relaxed)) {
  }
  return p;
}

void CudaAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  OnDevice(ordinal_, [&] { return cudaFreeAsync(p, reinterpret_cast<cudaStream_t>(stream_)); });
  in_use_.fetch_sub(bytes == 0 ? 1 : bytes, std::memory_order_relaxed);
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Create(const DeviceName& name,
                                                       size_t memory_limit) {
  if (!name.type || *name.type != "GPU" || !name.index) {
    return InvalidArgument("CudaDevice: '{}' is not a fully specified GPU device", name.ToString());
  }
  std::string why;
  const int count = CudaDeviceCount(&why);
  const int ordinal = *name.index;
  if (ordinal < 0 || ordinal >= count) {
    return NotFound("device '{}': this process has {} GPU(s){}", name.ToString(), count,
                    count == 0 ? " (" + why + ")" : "");
  }
  const std::string where = fmt::format("GPU {} ('{}')", ordinal, name.ToString());
  size_t free_bytes = 0, total_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaError_t e = OnDevice(ordinal, [&] {
    cudaError_t r = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (r != cudaSuccess) return r;
    return cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  });
  if (e != cudaSuccess) return CudaError(e, "creating the compute stream", where);
  const size_t limit = memory_limit == 0 ? total_bytes : std::min(memory_limit, total_bytes);
  // Freed memory stays in the pool, up to the device's limit, for the next allocations. The
  // pool is the GPU's current one (made exportable for CUDA IPC where the GPU can share it),
  // shared by every CudaDevice of this process on that GPU.
  auto exportable = PrepareTensorPool(ordinal, limit);
  if (!exportable.ok()) {
    OnDevice(ordinal, [&] { return cudaStreamDestroy(stream); });
    return exportable.status();
  }
  return std::unique_ptr<CudaDevice>(
      new CudaDevice(name, ordinal, reinterpret_cast<CudaStream>(stream), limit));
}

// Pinned staging buffers of one direction: two chunks, filled and drained in turn, each with
// an event marking when the copy stream is done with it.
struct StagingDirection {
  Mutex mu;  // one copy at a time in each direction
  cudaStream_t stream = nullptr;
  void* chunk[2] = {nullptr, nullptr};
  cudaEvent_t chunk_done[2] = {nullptr, nullptr};
  cudaEvent_t joined = nullptr;  // joins the copy stream and the compute stream

  ~StagingDirection() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (int i = 0; i < 2; ++i) {
      if (chunk[i] != nullptr) cudaFreeHost(chunk[i]);
      if (chunk_done[i] != nullptr) cudaEventDestroy(chunk_done[i]);
    }
    if (joined != nullptr) cudaEventDestroy(joined);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Makes the stream, buffers and events the first time.
  cudaError_t Ready() {
    if (stream != nullptr) return cudaSuccess;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && e == cudaSuccess; ++i) {
      e = cudaHostAlloc(&chunk[i], kCudaStagingChunk, cudaHostAllocPortable);
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&chunk_done[i], cudaEventDisableTiming);
    }
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    return e;
  }
};

struct CudaDevice::Staging {
  StagingDirection in, out;  // host to device, device to host
};

namespace {

// A tensor of one GPU on its way to another GPU of this process (CudaDevice::SendView): owns
// the sender's tensor and the event after which its value is complete. The view's buffer
// points at the sender's memory; when the view's last reference goes, so does the sender's
// tensor (freed on the sender's stream) and the event.
class CudaSentView final : public Allocator {
 public:
  CudaSentView(Tensor source, int ordinal, cudaEvent_t ready)
      : source_(std::move(source)), ordinal_(ordinal), ready_(ready) {}
  void* Allocate(size_t, size_t) override { return nullptr; }
  void Deallocate(void*, size_t) override {}
  const std::string& device() const override { return source_.device(); }
  bool host_accessible() const override { return false; }
  int ordinal() const { return ordinal_; }
  cudaEvent_t ready() const { return ready_; }
  // To another process of this host: a CudaIpcHandle's wire form, valid after the ready event:
  // the sender's tensor itself where it is from the exportable pool, else the bytes copied
  // into a block of this process's exporter. Either is the peer's until this view goes (the
  // transport holds it until the peer is done).
  Result<std::string> ExportToPeer(const void* p, size_t bytes) override;

 private:
  ~CudaSentView() override;
  Tensor source_;
  int ordinal_;
  cudaEvent_t ready_;
  std::vector<CudaIpcHandle> exported_;  // released with the view
};

// This process's CUDA IPC exporter of each GPU, and the stream its copies go on.
struct GpuExporter {
  std::unique_ptr<CudaIpcExporter> exporter;
  cudaStream_t stream = nullptr;
};

Result<GpuExporter*> ExporterOf(int ordinal) {
  static Mutex mu;
  static auto* exporters = new std::map<int, std::unique_ptr<GpuExporter>>;
  MutexLock lock(mu);
  auto& slot = (*exporters)[ordinal];
  if (slot == nullptr) {
    ASSIGN_OR_RETURN(auto exporter, CudaIpcExporter::Create(ordinal));
    auto g = std::make_unique<GpuExporter>();
    cudaError_t e = OnDevice(
        ordinal, [&] { return cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking); });
    if (e != cudaSuccess) {
      return CudaError(e, "creating the CUDA IPC stream", fmt::format("gpu:{}", ordinal));
    }
    g->exporter = std::move(exporter);
    slot = std::move(g);
  }
  return slot.get();
}

Result<std::string> CudaSentView::ExportToPeer(const void* p, size_t bytes) {
  ASSIGN_OR_RETURN(GpuExporter * g, ExporterOf(ordinal_));
  cudaError_t e = OnDevice(ordinal_, [&] { return cudaStreamWaitEvent(g->stream, ready_, 0); });
  if (e != cudaSuccess) return CudaError(e, "ordering a CUDA IPC export", device());
  // The allocation holding the tensor, where this process's CudaAllocator made it.
  const void* allocation = nullptr;
  if (dynamic_cast<const CudaAllocator*>(source_.allocator()) != nullptr) {
    allocation = static_cast<const char*>(source_.raw_data()) - source_.byte_offset();
  }
  ASSIGN_OR_RETURN(
      CudaIpcHandle h,
      g->exporter->Export(p, bytes, reinterpret_cast<CudaStream>(g->stream), allocation));
  std::string wire = h.Encode();
  exported_.push_back(std::move(h));
  return wire;
}

CudaSentView::~CudaSentView() {
  cudaEventDestroy(ready_);
  if (exported_.empty()) return;
  auto g = ExporterOf(ordinal_);
  if (!g.ok()) return;
  for (const CudaIpcHandle& h : exported_) (void)(*g)->exporter->Release(h);
}

// Creates an event and records it on `stream` (the caller's device current); on failure no
// event is left.
cudaError_t RecordNewEvent(cudaStream_t stream, cudaEvent_t* event) {
  cudaError_t r = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  if (r == cudaSuccess) r = cudaEventRecord(*event, stream);
  if (r != cudaSuccess && *event != nullptr) {
    cudaEventDestroy(*event);
    *event = nullptr;
  }
  return r;
}

// Gives every GPU that can reach `ordinal`'s memory directly access to it: to cudaMalloc'd
// memory (peer access) and to the stream-ordered pool's. Best effort: without it, peer copies
// are staged by CUDA.
void EnablePeerAccess(int ordinal, int count) {
  cudaMemPool_t pool = nullptr;  // the tensors' (PrepareTensorPool)
  const bool have_pool = cudaDeviceGetMemPool(&pool, ordinal) == cudaSuccess;
  for (int peer = 0; peer < count; ++peer) {
    int can = 0;
    if (peer == ordinal || cudaDeviceCanAccessPeer(&can, peer, ordinal) != cudaSuccess || !can) {
      continue;
    }
    OnDevice(peer, [&] { return cudaDeviceEnablePeerAccess(ordinal, 0); });
    if (have_pool) {
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = peer;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      cudaMemPoolSetAccess(pool, &access, 1);
    }
  }
  cudaGetLastError();  // cudaErrorPeerAccessAlreadyEnabled and the like are not errors here
}

}  // namespace

CudaDevice::CudaDevice(const DeviceName& name, int ordinal, CudaStream stream, size_t limit)
    : Device(name, [ordinal] { cudaSetDevice(ordinal); }),
      ordinal_(ordinal),
      stream_(stream),
      allocator_(MakeAllocator<CudaAllocator>(canonical_name(), ordinal, stream, limit)),
      context_(std::make_unique<CudaDeviceContext>(this)),
      staging_(std::make_unique<Staging>()) {
  EnablePeerAccess(ordinal, CudaDeviceCount());
}

CudaDevice::~CudaDevice() {
  // The compute stream goes with the allocator's last reference (tensors of this device may
  // live on); the copy streams and pinned buffers go here, once idle.
  (void)Synchronize();
  OnDevice(ordinal_, [&] {
    staging_.reset();
    return cudaSuccess;
  });
}

MemoryStats CudaDevice::memory() const {
  return {.limit = allocator_->limit(),
          .in_use = allocator_->bytes_in_use(),
          .peak = allocator_->peak_bytes()};
}

Result<Tensor> CudaDevice::CopyFromHost(const Tensor& host) {
  if (!host.valid()) return InvalidArgument("CopyFromHost to '{}': no tensor", canonical_name());
  StagingDirection& in = staging_->in;
  MutexLock lock(in.mu);
  Result<Tensor> out = Status::OK();
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r = in.Ready();
    if (r != cudaSuccess) return r;
    {
      // Memory the copy stream fills ahead of the compute stream.
      CudaAllocator::OrderedOn on(allocator_.get(), reinterpret_cast<CudaStream>(in.stream));
      out = Tensor::Allocate(allocator(), host.dtype(), host.shape());
    }
    if (!out.ok() || host.num_bytes() == 0) return cudaSuccess;
    const char* from = static_cast<const char*>(host.raw_data());
    char* to = static_cast<char*>(out->raw_data());
    const size_t bytes = host.num_bytes();
    for (size_t off = 0, i = 0; off < bytes; off += kCudaStagingChunk, ++i) {
      const size_t n = std::min(kCudaStagingChunk, bytes - off);
      const int b = static_cast<int>(i % 2);
      if ((r = cudaEventSynchronize(in.chunk_done[b])) != cudaSuccess) return r;  // drained
      std::memcpy(in.chunk[b], from + off, n);
      r = cudaMemcpyAsync(to + off, in.chunk[b], n, cudaMemcpyHostToDevice, in.stream);
      if (r != cudaSuccess) return r;
      if ((r = cudaEventRecord(in.chunk_done[b], in.stream)) != cudaSuccess) return r;
    }
    if ((r = cudaEventRecord(in.joined, in.stream)) != cudaSuccess) return r;
    return cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream_), in.joined, 0);
  });
  if (e != cudaSuccess) {
    return CudaError(e, fmt::format("copying {} bytes to the device", host.num_bytes()),
                     canonical_name());
  }
  return out;
}

Result<Tensor> CudaDevice::CopyToHost(const Tensor& tensor) {
  if (!tensor.valid()) return InvalidArgument("CopyToHost from '{}': no tensor", canonical_name());
  ReleaseHeld(false);
  Tensor out(tensor.dtype(), tensor.shape());
  if (tensor.num_bytes() == 0) return out;
  StagingDirection& o = staging_->out;
  MutexLock lock(o.mu);
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r = o.Ready();
    if (r != cudaSuccess) return r;
    // The copy stream starts where the compute stream is now.
    if ((r = cudaEventRecord(o.joined, reinterpret_cast<cudaStream_t>(stream_))) != cudaSuccess) {
      return r;
    }
    if ((r = cudaStreamWaitEvent(o.stream, o.joined, 0)) != cudaSuccess) return r;
    const char* from = static_cast<const char*>(tensor.raw_data());
    char* to = static_cast<char*>(out.raw_data());
    const size_t bytes = tensor.num_bytes();
    const size_t chunks = (bytes + kCudaStagingChunk - 1) / kCudaStagingChunk;
    // Chunk i is copied into buffer i % 2 while the host drains chunk i - 1 from the other.
    auto drain = [&](size_t i) {
      const size_t off = i * kCudaStagingChunk;
      cudaError_t d = cudaEventSynchronize(o.chunk_done[i % 2]);
      if (d == cudaSuccess)
        std::memcpy(to + off, o.chunk[i % 2], std::min(kCudaStagingChunk, bytes - off));
      return d;
    };
    for (size_t i = 0; i < chunks; ++i) {
      const size_t off = i * kCudaStagingChunk;
      r = cudaMemcpyAsync(o.chunk[i % 2], from + off, std::min(kCudaStagingChunk, bytes - off),
                          cudaMemcpyDeviceToHost, o.stream);
      if (r != cudaSuccess) return r;
      if ((r = cudaEventRecord(o.chunk_done[i % 2], o.stream)) != cudaSuccess) return r;
      if (i > 0 && (r = drain(i - 1)) != cudaSuccess) return r;
    }
    return drain(chunks - 1);
  });
  if (e != cudaSuccess) {
    return CudaError(e, fmt::format("copying {} bytes to the host", tensor.num_bytes()),
                     canonical_name());
  }
  return out;
}

Result<Tensor> CudaDevice::SendView(const Tensor& tensor) {
  if (tensor.host_accessible()) return tensor;
  cudaEvent_t ready = nullptr;
  cudaError_t e = OnDevice(
      ordinal_, [&] { return RecordNewEvent(reinterpret_cast<cudaStream_t>(stream_), &ready); });
  if (e != cudaSuccess)
    return CudaError(e, "marking a tensor sent to another GPU", canonical_name());
  auto* view = new CudaSentView(tensor, ordinal_, ready);
  Tensor out = Tensor::Borrow(view, tensor.raw_data(), tensor.dtype(), tensor.shape());
  view->Unref();  // the view's buffer holds it now
  return out;
}

Result<Tensor> CudaDevice::CopyFromDevice(const Tensor& sent) {
  if (sent.host_accessible()) return CopyFromHost(sent);
  if (sent.allocator() == allocator()) return sent;
  if (auto* peer = dynamic_cast<PeerDeviceMemory*>(sent.allocator()))
    return CopyFromPeer(sent, *peer);
  auto* view = dynamic_cast<CudaSentView*>(sent.allocator());
  if (view == nullptr) {
    return Unimplemented("'{}' cannot copy from {} memory: not a GPU tensor sent in this process",
                         canonical_name(), sent.device());
  }
  ReleaseHeld(false);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(allocator(), sent.dtype(), sent.shape()));
  cudaEvent_t copied = nullptr;
  cudaError_t e = OnDevice(ordinal_, [&] {
    auto stream = reinterpret_cast<cudaStream_t>(stream_);
    cudaError_t r = cudaStreamWaitEvent(stream, view->ready(), 0);
    if (r != cudaSuccess || sent.num_bytes() == 0) return r;
    r = view->ordinal() == ordinal_
            ? cudaMemcpyAsync(out.raw_data(), sent.raw_data(), sent.num_bytes(),
                              cudaMemcpyDeviceToDevice, stream)
            : cudaMemcpyPeerAsync(out.raw_data(), ordinal_, sent.raw_data(), view->ordinal(),
                                  sent.num_bytes(), stream);
    if (r != cudaSuccess) return r;
    return RecordNewEvent(stream, &copied);
  });
  if (e != cudaSuccess) {
    (void)Synchronize();  // the sender's memory may be read still: let go of it only after
    return CudaError(e, fmt::format("copying {} bytes from {}", sent.num_bytes(), sent.device()),
                     canonical_name());
  }
  if (copied != nullptr) HoldUntil(copied, sent);
  return out;
}

Result<Tensor> CudaDevice::CopyFromPeer(const Tensor& sent, const PeerDeviceMemory& memory) {
  ASSIGN_OR_RETURN(CudaIpcHandle h, CudaIpcHandle::Decode(memory.handle()));
  if (h.bytes != sent.num_bytes()) {
    return InvalidArgument("'{}': a CUDA IPC handle of {} bytes for a tensor of {} from {}",
                           canonical_name(), h.bytes, sent.num_bytes(), sent.device());
  }
  {
    MutexLock lock(held_mu_);
    if (importer_ == nullptr) {
      auto importer = CudaIpcImporter::Create(ordinal_);
      if (!importer.ok()) return importer.status();
      importer_ = std::move(importer).value();
    }
  }
  ReleaseHeld(false);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(allocator(), sent.dtype(), sent.shape()));
  RETURN_IF_ERROR(importer_->CopyOut(h, out.raw_data(), stream_));
  cudaEvent_t copied = nullptr;
  cudaError_t e = OnDevice(
      ordinal_, [&] { return RecordNewEvent(reinterpret_cast<cudaStream_t>(stream_), &copied); });
  if (e != cudaSuccess) {
    (void)Synchronize();  // the exporter's block is read until the copy is done
    return CudaError(e, "copying a tensor by CUDA IPC", canonical_name());
  }
  HoldUntil(copied, sent);  // its release tells the exporting process, once copied
  return out;
}

void CudaDevice::HoldUntil(void* event, Tensor tensor) {
  MutexLock lock(held_mu_);
  held_.emplace_back(event, std::move(tensor));
}

void CudaDevice::ReleaseHeld(bool all) {
  std::vector<Tensor> done;  // dropped outside the lock: a free queues on the sender's stream
  {
    MutexLock lock(held_mu_);
    auto passed = [&](std::pair<void*, Tensor>& h) {
      auto event = static_cast<cudaEvent_t>(h.first);
      if (!all && cudaEventQuery(event) != cudaSuccess) return false;
      cudaEventDestroy(event);
      done.push_back(std::move(h.second));
      return true;
    };
    held_.erase(std::remove_if(held_.begin(), held_.end(), passed), held_.end());
  }
  cudaGetLastError();  // cudaErrorNotReady from the queries
}

size_t CudaDevice::held_tensors() const {
  MutexLock lock(held_mu_);
  return held_.size();
}

Status CudaDevice::CopyOnDevice(const Tensor& src, Tensor& dst) {
  if (src.num_bytes() != dst.num_bytes()) {
    return InvalidArgument("copy on '{}' of {} bytes into a tensor of {} bytes", canonical_name(),
                           src.num_bytes(), dst.num_bytes());
  }
  if (src.num_bytes() == 0 || src.raw_data() == dst.raw_data()) return Status::OK();
  cudaError_t e = OnDevice(ordinal_, [&] {
    return cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.num_bytes(),
                           cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(stream_));
  });
  if (e != cudaSuccess) {
    return CudaError(e, fmt::format("copying {} bytes on the device", src.num_bytes()),
                     canonical_name());
  }
  return Status::OK();
}

std::unique_ptr<NodeTimer> CudaDevice::NewNodeTimer() {
  return cuda::NewCudaNodeTimer(ordinal_, stream_, canonical_name());
}

Status CudaDevice::Synchronize() {
  cudaError_t e = OnDevice(
      ordinal_, [&] { return cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_)); });
  if (e != cudaSuccess) return CudaError(e, "synchronizing the compute stream", canonical_name());
  ReleaseHeld(true);  // every copy queued before has run
  return Status::OK();
}

}  // namespace dflow
