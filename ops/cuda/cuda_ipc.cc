#include "ops/cuda/cuda_ipc.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "ops/cuda/cuda_call.h"

namespace dflow {

std::string CudaIpcHandle::Encode() const {
  std::string out(kWireBytes, '\0');
  char* p = out.data();
  auto put = [&p](const void* v, size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  put(memory.data(), memory.size());
  put(event.data(), event.size());
  put(&offset, 8);
  put(&bytes, 8);
  put(&block, 8);
  put(&pid, 4);
  return out;
}

Result<CudaIpcHandle> CudaIpcHandle::Decode(std::string_view wire) {
  if (wire.size() != kWireBytes) {
    return InvalidArgument("a CUDA IPC handle is {} bytes, not {}", kWireBytes, wire.size());
  }
  CudaIpcHandle h;
  const char* p = wire.data();
  auto get = [&p](void* v, size_t n) {
    std::memcpy(v, p, n);
    p += n;
  };
  get(h.memory.data(), h.memory.size());
  get(h.event.data(), h.event.size());
  get(&h.offset, 8);
  get(&h.bytes, 8);
  get(&h.block, 8);
  get(&h.pid, 4);
  return h;
}

namespace {

constexpr size_t kBlockGranularity = size_t{2} << 20;

Status CudaFailed(cudaError_t e, std::string_view what, int ordinal) {
  return CudaError(e, what, fmt::format("gpu:{}", ordinal));
}

Status CheckGpu(int ordinal) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Unavailable("CUDA IPC on gpu:{}: {} ({})", ordinal, cudaGetErrorString(e),
                       cudaGetErrorName(e));
  }
  if (ordinal < 0 || ordinal >= n) {
    return Unavailable("CUDA IPC on gpu:{}: this process has {} GPU(s)", ordinal, n);
  }
  return Status::OK();
}

}  // namespace

struct CudaIpcExporter::Block {
  uint64_t id = 0;
  void* data = nullptr;
  size_t size = 0;
  cudaEvent_t ready = nullptr;  // interprocess
  cudaIpcMemHandle_t memory{};
  cudaIpcEventHandle_t event{};
  bool out = false;  // exported, not released
};

CudaIpcExporter::CudaIpcExporter(int ordinal) : ordinal_(ordinal) {}

Result<std::unique_ptr<CudaIpcExporter>> CudaIpcExporter::Create(int ordinal) {
  RETURN_IF_ERROR(CheckGpu(ordinal));
  return std::unique_ptr<CudaIpcExporter>(new CudaIpcExporter(ordinal));
}

CudaIpcExporter::~CudaIpcExporter() {
  MutexLock lock(mu_);
  OnDevice(ordinal_, [&] {
    for (auto& b : blocks_) {
      cudaEventSynchronize(b->ready);
      cudaEventDestroy(b->ready);
      cudaFree(b->data);
    }
    return cudaSuccess;
  });
}

Result<CudaIpcHandle> CudaIpcExporter::Export(const void* data, size_t bytes, CudaStream stream) {
  MutexLock lock(mu_);
  Block* chosen = nullptr;
  for (auto& b : blocks_) {  // the smallest free block that holds it
    if (!b->out && b->size >= bytes && (chosen == nullptr || b->size < chosen->size)) {
      chosen = b.get();
    }
  }
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r = cudaSuccess;
    if (chosen == nullptr) {
      auto b = std::make_unique<Block>();
      b->id = blocks_.size();
      b->size = (std::max<size_t>(bytes, 1) + kBlockGranularity - 1) / kBlockGranularity *
                kBlockGranularity;
      if ((r = cudaMalloc(&b->data, b->size)) != cudaSuccess) return r;
      r = cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming | cudaEventInterprocess);
      if (r == cudaSuccess) r = cudaIpcGetMemHandle(&b->memory, b->data);
      if (r == cudaSuccess) r = cudaIpcGetEventHandle(&b->event, b->ready);
      if (r != cudaSuccess) {
        if (b->ready != nullptr) cudaEventDestroy(b->ready);
        cudaFree(b->data);
        return r;
      }
      chosen = b.get();
      blocks_.push_back(std::move(b));
    }
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (bytes > 0) {
      r = cudaMemcpyAsync(chosen->data, data, bytes, cudaMemcpyDeviceToDevice, s);
      if (r != cudaSuccess) return r;
    }
    return cudaEventRecord(chosen->ready, s);
  });
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
      return ResourceExhausted("gpu:{}: no memory for a CUDA IPC block of {} bytes", ordinal_,
                               bytes);
    }
    return CudaFailed(e, fmt::format("exporting {} bytes by CUDA IPC", bytes), ordinal_);
  }
  chosen->out = true;
  CudaIpcHandle h;
  std::memcpy(h.memory.data(), &chosen->memory, sizeof chosen->memory);
  std::memcpy(h.event.data(), &chosen->event, sizeof chosen->event);
  static_assert(sizeof(cudaIpcMemHandle_t) == 64 && sizeof(cudaIpcEventHandle_t) == 64);
  h.offset = 0;
  h.bytes = bytes;
  h.block = chosen->id;
  h.pid = static_cast<int32_t>(getpid());
  return h;
}

Status CudaIpcExporter::Release(uint64_t block) {
  MutexLock lock(mu_);
  if (block >= blocks_.size() || !blocks_[block]->out) {
    return InvalidArgument("gpu:{}: CUDA IPC block {} is not out (of {} blocks)", ordinal_, block,
                           blocks_.size());
  }
  blocks_[block]->out = false;
  return Status::OK();
}

size_t CudaIpcExporter::blocks() const {
  MutexLock lock(mu_);
  return blocks_.size();
}

size_t CudaIpcExporter::blocks_in_use() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& b : blocks_) n += b->out;
  return n;
}

struct CudaIpcImporter::Opened {
  void* data = nullptr;
  cudaEvent_t event = nullptr;
};

CudaIpcImporter::CudaIpcImporter(int ordinal) : ordinal_(ordinal) {}

Result<std::unique_ptr<CudaIpcImporter>> CudaIpcImporter::Create(int ordinal) {
  RETURN_IF_ERROR(CheckGpu(ordinal));
  return std::unique_ptr<CudaIpcImporter>(new CudaIpcImporter(ordinal));
}

CudaIpcImporter::~CudaIpcImporter() {
  MutexLock lock(mu_);
  OnDevice(ordinal_, [&] {
    cudaDeviceSynchronize();  // no copy out of a block is left running
    for (auto& [key, o] : opened_) {
      cudaEventDestroy(o->event);
      cudaIpcCloseMemHandle(o->data);
    }
    return cudaSuccess;
  });
}

Status CudaIpcImporter::CopyOut(const CudaIpcHandle& handle, void* dst, CudaStream stream) {
  if (handle.pid == static_cast<int32_t>(getpid())) {
    return InvalidArgument(
        "gpu:{}: a CUDA IPC handle of this process ({}) is not opened by CUDA IPC", ordinal_,
        handle.pid);
  }
  MutexLock lock(mu_);
  auto key = std::make_pair(handle.pid, handle.memory);
  auto it = opened_.find(key);
  cudaError_t e = OnDevice(ordinal_, [&] {
    if (it == opened_.end()) {
      auto o = std::make_unique<Opened>();
      cudaIpcMemHandle_t mh;
      cudaIpcEventHandle_t eh;
      std::memcpy(&mh, handle.memory.data(), sizeof mh);
      std::memcpy(&eh, handle.event.data(), sizeof eh);
      cudaError_t r = cudaIpcOpenMemHandle(&o->data, mh, cudaIpcMemLazyEnablePeerAccess);
      if (r != cudaSuccess) return r;
      if ((r = cudaIpcOpenEventHandle(&o->event, eh)) != cudaSuccess) {
        cudaIpcCloseMemHandle(o->data);
        return r;
      }
      it = opened_.emplace(key, std::move(o)).first;
    }
    auto s = reinterpret_cast<cudaStream_t>(stream);
    cudaError_t r = cudaStreamWaitEvent(s, it->second->event, 0);
    if (r != cudaSuccess || handle.bytes == 0) return r;
    return cudaMemcpyAsync(dst, static_cast<char*>(it->second->data) + handle.offset, handle.bytes,
                           cudaMemcpyDeviceToDevice, s);
  });
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaFailed(e,
                      fmt::format("copying {} bytes by CUDA IPC from process {} (block {})",
                                  handle.bytes, handle.pid, handle.block),
                      ordinal_);
  }
  return Status::OK();
}

size_t CudaIpcImporter::open_blocks() const {
  MutexLock lock(mu_);
  return opened_.size();
}

}  // namespace dflow
