#include "runtime/cuda_device.h"

#include <fmt/format.h>

#include "runtime/device_factory.h"

#if DFLOW_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dflow {

#if !DFLOW_WITH_CUDA

int CudaDeviceCount(std::string* why) {
  if (why != nullptr) *why = "dflow was built without CUDA (DFLOW_WITH_CUDA)";
  return 0;
}

Status RegisterCudaDeviceType(DeviceFactory&) { return Status::OK(); }

CudaAllocator::CudaAllocator(std::string device, int ordinal, CudaStream stream, size_t limit)
    : device_(std::move(device)), ordinal_(ordinal), stream_(stream), limit_(limit) {}
CudaAllocator::~CudaAllocator() = default;
void* CudaAllocator::Allocate(size_t, size_t) { return nullptr; }
void CudaAllocator::Deallocate(void*, size_t) {}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Create(const DeviceName& name, size_t) {
  std::string why;
  CudaDeviceCount(&why);
  return NotFound("device '{}': this process has 0 GPU(s) ({})", name.ToString(), why);
}
CudaDevice::~CudaDevice() = default;
// Unreachable without CUDA (Create never makes a CudaDevice); defined for the vtable.
MemoryStats CudaDevice::memory() const { return {}; }
Result<Tensor> CudaDevice::CopyFromHost(const Tensor&) { return Internal("built without CUDA"); }
Result<Tensor> CudaDevice::CopyToHost(const Tensor&) { return Internal("built without CUDA"); }
Status CudaDevice::Synchronize() { return Internal("built without CUDA"); }
Status CudaDevice::CopyOnDevice(const Tensor&, Tensor&) { return Internal("built without CUDA"); }

#else

namespace {

// A CUDA error as a Status naming what failed and where.
Status CudaError(cudaError_t e, std::string_view what, std::string_view where) {
  return Internal("{} on {} failed: {} ({})", what, where, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

// Runs `fn` with `ordinal` as the calling thread's current device, restoring the one before.
template <typename F>
auto OnDevice(int ordinal, F&& fn) {
  int before = -1;
  const bool had = cudaGetDevice(&before) == cudaSuccess;
  if (!had || before != ordinal) cudaSetDevice(ordinal);
  auto result = fn();
  if (had && before != ordinal) cudaSetDevice(before);
  return result;
}

}  // namespace

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

Status RegisterCudaDeviceType(DeviceFactory& factory) {
  if (CudaDeviceCount() == 0) return Status::OK();
  return factory.Register(
      "GPU",
      [](const DeviceName& name, const DeviceOptions& options) -> Result<std::unique_ptr<Device>> {
        ASSIGN_OR_RETURN(auto gpu, CudaDevice::Create(name, options.memory_limit));
        return std::unique_ptr<Device>(std::move(gpu));
      });
}

CudaAllocator::CudaAllocator(std::string device, int ordinal, CudaStream stream, size_t limit)
    : device_(std::move(device)), ordinal_(ordinal), stream_(stream), limit_(limit) {}

CudaAllocator::~CudaAllocator() {
  OnDevice(ordinal_, [&] {
    cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_));
    return cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
  });
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
  cudaError_t e = OnDevice(
      ordinal_, [&] { return cudaMallocAsync(&p, size, reinterpret_cast<cudaStream_t>(stream_)); });
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
  // Freed memory stays in the pool, up to the device's limit, for the next allocations.
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
    uint64_t threshold = limit;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  }
  cudaGetLastError();
  return std::unique_ptr<CudaDevice>(
      new CudaDevice(name, ordinal, reinterpret_cast<CudaStream>(stream), limit));
}

CudaDevice::CudaDevice(const DeviceName& name, int ordinal, CudaStream stream, size_t limit)
    : Device(name, [ordinal] { cudaSetDevice(ordinal); }),
      ordinal_(ordinal),
      stream_(stream),
      allocator_(MakeAllocator<CudaAllocator>(canonical_name(), ordinal, stream, limit)),
      context_(std::make_unique<CudaDeviceContext>(this)) {}

CudaDevice::~CudaDevice() {
  // The stream goes with the allocator's last reference (tensors of this device may live on).
  (void)Synchronize();
}

MemoryStats CudaDevice::memory() const {
  return {.limit = allocator_->limit(),
          .in_use = allocator_->bytes_in_use(),
          .peak = allocator_->peak_bytes()};
}

Result<Tensor> CudaDevice::CopyFromHost(const Tensor& host) {
  if (!host.valid()) return InvalidArgument("CopyFromHost to '{}': no tensor", canonical_name());
  ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(allocator(), host.dtype(), host.shape()));
  if (host.num_bytes() == 0) return out;
  cudaError_t e = OnDevice(ordinal_, [&] {
    return cudaMemcpyAsync(out.raw_data(), host.raw_data(), host.num_bytes(),
                           cudaMemcpyHostToDevice, reinterpret_cast<cudaStream_t>(stream_));
  });
  if (e != cudaSuccess) {
    return CudaError(e, fmt::format("copying {} bytes to the device", host.num_bytes()),
                     canonical_name());
  }
  return out;
}

Result<Tensor> CudaDevice::CopyToHost(const Tensor& tensor) {
  if (!tensor.valid()) return InvalidArgument("CopyToHost from '{}': no tensor", canonical_name());
  Tensor out(tensor.dtype(), tensor.shape());
  if (tensor.num_bytes() == 0) return out;
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r =
        cudaMemcpyAsync(out.raw_data(), tensor.raw_data(), tensor.num_bytes(),
                        cudaMemcpyDeviceToHost, reinterpret_cast<cudaStream_t>(stream_));
    if (r != cudaSuccess) return r;
    return cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_));
  });
  if (e != cudaSuccess) {
    return CudaError(e, fmt::format("copying {} bytes to the host", tensor.num_bytes()),
                     canonical_name());
  }
  return out;
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

Status CudaDevice::Synchronize() {
  cudaError_t e = OnDevice(
      ordinal_, [&] { return cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_)); });
  if (e != cudaSuccess) return CudaError(e, "synchronizing the compute stream", canonical_name());
  return Status::OK();
}

#endif  // DFLOW_WITH_CUDA

}  // namespace dflow
