// CudaDevice: one NVIDIA GPU as a dflow device ("gpu:N"), built where the CUDA toolkit is found
// (DFLOW_WITH_CUDA). Its memory comes from CudaAllocator; its work goes on one compute stream,
// in order; copies to and from the host are ordered on that stream, and the host waits only
// where a value reaches host memory (CopyToHost, Synchronize).
//
// CudaAllocator is stream-ordered: it takes memory from the device's CUDA memory pool with
// cudaMallocAsync and gives it back with cudaFreeAsync on the compute stream, so a block freed
// while kernels that read it are queued is reused only by work queued after them. The pool
// keeps freed memory cached (its release threshold is the device's limit). The device's limit
// is enforced here, before the pool is asked: what the placer plans with is what the
// allocator allows.
//
// Copies: to and from the host through pinned staging buffers on two copy streams joined to
// the compute stream by events; between GPUs of one process peer to peer (cudaMemcpyPeerAsync,
// direct where the GPUs have peer access, which Create turns on, staged by CUDA otherwise).
//
// Machines without a GPU (or without a driver) build and link this; CudaDeviceCount() is then 0
// and says why, the "GPU" device type has no device (ops/cuda/cuda_backend.h) and
// CudaDevice::Create is NotFound.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/device.h"
#include "graph/mutex.h"
#include "ops/cuda/cuda_context.h"

namespace dflow {

// The size of each of the two pinned buffers a GPU stages host copies through, per direction.
inline constexpr size_t kCudaStagingChunk = size_t{4} << 20;

// The GPUs this process can use; 0 with `why` set when there are none (no driver, no device).
int CudaDeviceCount(std::string* why = nullptr);

class CudaIpcImporter;
class PeerDeviceMemory;

class CudaAllocator final : public Allocator {
 public:
  // `stream`: where frees are ordered; the allocator owns it from here on and destroys it when
  // the last reference goes (a tensor may outlive its device, and its free is queued there).
  // `limit` 0: no limit.
  CudaAllocator(std::string device, int ordinal, CudaStream stream, size_t limit);
  ~CudaAllocator() override;
  CudaStream stream() const { return stream_; }

  // While one lives, this thread's allocations from `allocator` are ordered on `stream` (a
  // copy stream filling them ahead of the compute stream, which must then wait for that
  // stream before it uses the memory). Frees stay on the compute stream.
  class OrderedOn {
   public:
    OrderedOn(CudaAllocator* allocator, CudaStream stream);
    ~OrderedOn();

   private:
    const CudaAllocator* before_owner_;
    CudaStream before_stream_;
  };

  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* p, size_t bytes) override;
  const std::string& device() const override { return device_; }
  bool host_accessible() const override { return false; }
  size_t limit() const override { return limit_; }
  size_t bytes_in_use() const override { return in_use_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  void ResetPeak() { peak_.store(bytes_in_use(), std::memory_order_relaxed); }

 private:
  std::string device_;
  int ordinal_;
  CudaStream stream_;
  size_t limit_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

class CudaDevice final : public Device {
 public:
  // REQUIRES: name is fully specified with type GPU. NotFound naming the device when its index
  // is not a GPU of this process; the CUDA error otherwise. `memory_limit` 0: the GPU's memory.
  static Result<std::unique_ptr<CudaDevice>> Create(const DeviceName& name,
                                                    size_t memory_limit = 0);
  ~CudaDevice() override;

  Allocator* allocator() override { return allocator_.get(); }
  MemoryStats memory() const override;
  void ResetPeak() override { allocator_->ResetPeak(); }
  // Copies into device memory through pinned staging buffers on the host-to-device copy
  // stream, which fills memory allocated on it ahead of the compute stream; the compute stream
  // waits for the copy (an event) before the kernels queued after it. Returns once `host` has
  // been read, so the caller may drop or reuse it.
  Result<Tensor> CopyFromHost(const Tensor& host) override;
  // Waits for the compute stream's work up to here (an event), copies on the device-to-host
  // copy stream through pinned staging buffers, and returns the host tensor.
  Result<Tensor> CopyToHost(const Tensor& tensor) override;
  // A tensor of this GPU as it goes to another GPU of this process: a view holding `tensor`
  // and an event recorded on the compute stream, queued behind the work that computes it. The
  // host does not wait.
  Result<Tensor> SendView(const Tensor& tensor);
  // A copy in this GPU's memory of `sent`: host memory (CopyFromHost), another GPU's SendView
  // (the compute stream waits for its event, then copies peer to peer), another process's GPU
  // memory (PeerDeviceMemory: opened by CUDA IPC, the copy waiting on the exporter's event), or
  // this GPU's own memory (shared, no copy). The sender's memory is held until the copy has
  // run.
  Result<Tensor> CopyFromDevice(const Tensor& sent);
  Status Synchronize() override;
  // The GPU's ordinal and compute stream, for kernels (ops/cuda/cuda_context.h), and the
  // device's copies for the kernels every device shares (ops/common/).
  DeviceContext* context() override { return context_.get(); }
  // Times nodes by events on the compute stream (ops/cuda/cuda_node_timer.h).
  std::unique_ptr<NodeTimer> NewNodeTimer() override;
  // Queues a copy of `src` into `dst` (both on this GPU, the same size) on the compute stream.
  Status CopyOnDevice(const Tensor& src, Tensor& dst);

  int ordinal() const { return ordinal_; }
  // The compute stream (the allocator's).
  CudaStream stream() const { return stream_; }
  // Tensors held until an event of the compute stream has passed (the senders' memory of peer
  // copies); 0 after Synchronize.
  size_t held_tensors() const;

 private:
  struct Staging;  // the copy streams, pinned buffers and events (ops/cuda/cuda_device.cc)
  CudaDevice(const DeviceName& name, int ordinal, CudaStream stream, size_t limit);
  // Keeps `tensor` until `event` (a cudaEvent_t recorded on the compute stream) has passed.
  void HoldUntil(void* event, Tensor tensor);
  // Lets go of the held tensors whose events have passed (all of them when `all`, after a
  // synchronize).
  void ReleaseHeld(bool all);
  // CopyFromDevice of another process's GPU memory (CUDA IPC).
  Result<Tensor> CopyFromPeer(const Tensor& sent, const PeerDeviceMemory& memory);

  int ordinal_;
  CudaStream stream_;  // owned by allocator_
  AllocatorPtr<CudaAllocator> allocator_;
  std::unique_ptr<CudaContext> context_;
  std::unique_ptr<Staging> staging_;
  mutable Mutex held_mu_;
  std::vector<std::pair<void*, Tensor>> held_ DFLOW_GUARDED_BY(held_mu_);
  std::unique_ptr<CudaIpcImporter> importer_;  // made once, under held_mu_
};

}  // namespace dflow
