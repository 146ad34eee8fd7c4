#include "ops/cuda/cuda_ipc.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "framework/fd_passing.h"
#include "ops/cuda/cuda_call.h"

namespace dflow {

std::string CudaIpcHandle::Encode() const {
  std::string out(kFixedWireBytes, '\0');
  char* p = out.data();
  auto put = [&p](const void* v, size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  const uint8_t k = kind;
  const auto socket_bytes = static_cast<uint16_t>(std::min(socket.size(), kMaxSocketBytes));
  put(&k, 1);
  put(memory.data(), memory.size());
  put(event.data(), event.size());
  put(&offset, 8);
  put(&bytes, 8);
  put(&block, 8);
  put(&pid, 4);
  put(&pool, 4);
  put(&socket_bytes, 2);
  out.append(socket, 0, socket_bytes);
  return out;
}

Result<CudaIpcHandle> CudaIpcHandle::Decode(std::string_view wire) {
  if (wire.size() < kFixedWireBytes || wire.size() > kFixedWireBytes + kMaxSocketBytes) {
    return InvalidArgument("a CUDA IPC handle is {} to {} bytes, not {}", kFixedWireBytes,
                           kFixedWireBytes + kMaxSocketBytes, wire.size());
  }
  CudaIpcHandle h;
  const char* p = wire.data();
  auto get = [&p](void* v, size_t n) {
    std::memcpy(v, p, n);
    p += n;
  };
  uint8_t k = 0;
  uint16_t socket_bytes = 0;
  get(&k, 1);
  get(h.memory.data(), h.memory.size());
  get(h.event.data(), h.event.size());
  get(&h.offset, 8);
  get(&h.bytes, 8);
  get(&h.block, 8);
  get(&h.pid, 4);
  get(&h.pool, 4);
  get(&socket_bytes, 2);
  if (k != kBlock && k != kPool) return InvalidArgument("a CUDA IPC handle of kind {}", k);
  h.kind = static_cast<Kind>(k);
  if (wire.size() != kFixedWireBytes + socket_bytes) {
    return InvalidArgument("a CUDA IPC handle of {} bytes says its socket is {} bytes", wire.size(),
                           socket_bytes);
  }
  h.socket.assign(p, socket_bytes);
  if (h.kind == kPool && (h.socket.empty() || h.pool < 0)) {
    return InvalidArgument("a CUDA IPC pool handle without its exporter's socket or GPU");
  }
  if (h.offset > UINT64_MAX - h.bytes) {
    return InvalidArgument("a CUDA IPC handle of {} bytes at offset {}", h.bytes, h.offset);
  }
  return h;
}

std::string CudaPoolKey(int ordinal) { return fmt::format("cuda-pool/{}", ordinal); }

namespace {

constexpr size_t kBlockGranularity = size_t{2} << 20;
constexpr auto kPoolFetchDeadline = std::chrono::seconds(30);

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

// This process's tensor pools (PrepareTensorPool) and the server offering their descriptors.
struct TensorPools {
  Mutex mu;
  std::map<int, cudaMemPool_t> exportable DFLOW_GUARDED_BY(mu);  // by GPU
  std::map<int, bool> prepared DFLOW_GUARDED_BY(mu);
  std::map<int, bool> offered DFLOW_GUARDED_BY(mu);  // the descriptor is on `server`
  std::unique_ptr<FdServer> server DFLOW_GUARDED_BY(mu);
};

TensorPools& Pools() {
  static auto* pools = new TensorPools;  // never destroyed: tensors may outlive main
  return *pools;
}

bool PoolWayWanted() {
  const char* v = std::getenv("DFLOW_CUDA_IPC_POOL");
  return v == nullptr || std::string_view(v) != "0";
}

// GPU `ordinal`'s exportable pool, offered on this process's FdServer (started on first use);
// null where the GPU's tensors are not from one. Its socket path in `socket`.
Result<cudaMemPool_t> OfferedPool(int ordinal, std::string* socket) {
  TensorPools& pools = Pools();
  MutexLock lock(pools.mu);
  auto it = pools.exportable.find(ordinal);
  if (it == pools.exportable.end()) return static_cast<cudaMemPool_t>(nullptr);
  if (!pools.offered[ordinal]) {
    if (pools.server == nullptr) {
      ASSIGN_OR_RETURN(pools.server, FdServer::Start());
      // The pools outlive main, the socket file must not: removed when the process exits.
      static const std::string* path = new std::string(pools.server->path());
      std::atexit([] { unlink(path->c_str()); });
    }
    int fd = -1;
    cudaError_t e = cudaMemPoolExportToShareableHandle(&fd, it->second,
                                                       cudaMemHandleTypePosixFileDescriptor, 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return CudaFailed(e, "exporting the tensor pool's descriptor", ordinal);
    }
    UniqueFd owned(fd);
    RETURN_IF_ERROR(pools.server->Offer(CudaPoolKey(ordinal), owned.get()));
    pools.offered[ordinal] = true;
  }
  *socket = pools.server->path();
  return it->second;
}

}  // namespace

Result<bool> PrepareTensorPool(int ordinal, size_t keep_bytes) {
  TensorPools& pools = Pools();
  MutexLock lock(pools.mu);
  cudaError_t e = OnDevice(ordinal, [&] {
    if (!pools.prepared[ordinal]) {
      int handle_types = 0;
      if (PoolWayWanted() &&
          cudaDeviceGetAttribute(&handle_types, cudaDevAttrMemoryPoolSupportedHandleTypes,
                                 ordinal) == cudaSuccess &&
          (handle_types & cudaMemHandleTypePosixFileDescriptor) != 0) {
        cudaMemPoolProps props{};
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = ordinal;
        // Where it cannot be made or set, the default pool stays: the block way.
        cudaMemPool_t pool = nullptr;
        if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
          if (cudaDeviceSetMemPool(ordinal, pool) == cudaSuccess) {
            pools.exportable[ordinal] = pool;
          } else {
            cudaMemPoolDestroy(pool);
          }
        }
      }
      cudaGetLastError();
      pools.prepared[ordinal] = true;
    }
    cudaMemPool_t current = nullptr;
    cudaError_t r = cudaDeviceGetMemPool(&current, ordinal);
    if (r != cudaSuccess) return r;
    uint64_t threshold = 0;  // best effort, as a cache size is
    cudaMemPoolGetAttribute(current, cudaMemPoolAttrReleaseThreshold, &threshold);
    threshold = std::max<uint64_t>(threshold, keep_bytes);
    cudaMemPoolSetAttribute(current, cudaMemPoolAttrReleaseThreshold, &threshold);
    return cudaSuccess;
  });
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaFailed(e, "preparing the tensor pool", ordinal);
  }
  return pools.exportable.count(ordinal) > 0;
}

struct CudaIpcExporter::Block {
  uint64_t id = 0;
  void* data = nullptr;
  size_t size = 0;
  cudaEvent_t ready = nullptr;  // interprocess
  cudaIpcMemHandle_t memory{};
  cudaIpcEventHandle_t event{};
  bool out = false;  // exported, not released
};

// An interprocess event of the pool way: recorded after the exported tensor's work.
struct CudaIpcExporter::Event {
  uint64_t id = 0;
  cudaEvent_t ready = nullptr;
  cudaIpcEventHandle_t handle{};
  bool out = false;
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
    for (auto& ev : events_) {
      cudaEventSynchronize(ev->ready);
      cudaEventDestroy(ev->ready);
    }
    return cudaSuccess;
  });
}

Result<std::optional<CudaIpcHandle>> CudaIpcExporter::ExportFromPool(const void* data, size_t bytes,
                                                                     CudaStream stream,
                                                                     const void* allocation) {
  std::optional<CudaIpcHandle> none;
  if (allocation == nullptr || data < allocation) return none;
  std::string socket;
  ASSIGN_OR_RETURN(cudaMemPool_t pool, OfferedPool(ordinal_, &socket));
  if (pool == nullptr) return none;
  CudaIpcHandle h;
  static_assert(sizeof(cudaMemPoolPtrExportData) == 64 && sizeof(cudaIpcEventHandle_t) == 64);
  if (bytes > 0) {
    cudaMemPoolPtrExportData exported{};
    cudaError_t e = OnDevice(ordinal_, [&] {
      return cudaMemPoolExportPointer(&exported, const_cast<void*>(allocation));
    });
    if (e != cudaSuccess) {  // not the pool's (a tensor adopted from elsewhere): the block way
      cudaGetLastError();
      return none;
    }
    std::memcpy(h.memory.data(), &exported, sizeof exported);
  }
  Event* chosen = nullptr;
  for (auto& ev : events_) {
    if (!ev->out) {
      chosen = ev.get();
      break;
    }
  }
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r = cudaSuccess;
    if (chosen == nullptr) {
      auto ev = std::make_unique<Event>();
      ev->id = events_.size();
      r = cudaEventCreateWithFlags(&ev->ready, cudaEventDisableTiming | cudaEventInterprocess);
      if (r != cudaSuccess) return r;
      if ((r = cudaIpcGetEventHandle(&ev->handle, ev->ready)) != cudaSuccess) {
        cudaEventDestroy(ev->ready);
        return r;
      }
      chosen = ev.get();
      events_.push_back(std::move(ev));
    }
    return cudaEventRecord(chosen->ready, reinterpret_cast<cudaStream_t>(stream));
  });
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaFailed(e, fmt::format("exporting {} bytes by CUDA IPC from the pool", bytes),
                      ordinal_);
  }
  chosen->out = true;
  pool_exports_++;
  h.kind = CudaIpcHandle::kPool;
  std::memcpy(h.event.data(), &chosen->handle, sizeof chosen->handle);
  h.offset =
      static_cast<uint64_t>(static_cast<const char*>(data) - static_cast<const char*>(allocation));
  h.bytes = bytes;
  h.block = chosen->id;
  h.pid = static_cast<int32_t>(getpid());
  h.pool = ordinal_;
  h.socket = std::move(socket);
  return std::optional<CudaIpcHandle>(std::move(h));
}

Result<CudaIpcHandle> CudaIpcExporter::Export(const void* data, size_t bytes, CudaStream stream,
                                              const void* allocation) {
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(std::optional<CudaIpcHandle> pooled,
                   ExportFromPool(data, bytes, stream, allocation));
  if (pooled) return std::move(*pooled);
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

Status CudaIpcExporter::Release(const CudaIpcHandle& handle) {
  MutexLock lock(mu_);
  if (handle.kind == CudaIpcHandle::kPool) {
    if (handle.block >= events_.size() || !events_[handle.block]->out) {
      return InvalidArgument("gpu:{}: CUDA IPC event {} is not out (of {} events)", ordinal_,
                             handle.block, events_.size());
    }
    events_[handle.block]->out = false;
    return Status::OK();
  }
  if (handle.block >= blocks_.size() || !blocks_[handle.block]->out) {
    return InvalidArgument("gpu:{}: CUDA IPC block {} is not out (of {} blocks)", ordinal_,
                           handle.block, blocks_.size());
  }
  blocks_[handle.block]->out = false;
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

size_t CudaIpcExporter::pool_exports() const {
  MutexLock lock(mu_);
  return pool_exports_;
}

size_t CudaIpcExporter::events_in_use() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& ev : events_) n += ev->out;
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
    for (auto& [key, event] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
    for (auto& [key, pool] : pools_) cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool));
    return cudaSuccess;
  });
}

Status CudaIpcImporter::CopyOutOfPool(const CudaIpcHandle& handle, void* dst, CudaStream stream) {
  const std::string from =
      fmt::format("process {} (gpu:{} there, socket '{}')", handle.pid, handle.pool, handle.socket);
  auto pool_key = std::make_tuple(handle.pid, handle.socket, handle.pool);
  auto pool_it = pools_.find(pool_key);
  if (pool_it == pools_.end() && handle.bytes > 0) {
    ASSIGN_OR_RETURN(UniqueFd fd,
                     FetchFd(handle.socket, CudaPoolKey(handle.pool), kPoolFetchDeadline));
    cudaMemPool_t pool = nullptr;
    cudaError_t e = OnDevice(ordinal_, [&] {
      cudaError_t r = cudaMemPoolImportFromShareableHandle(
          &pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
          cudaMemHandleTypePosixFileDescriptor, 0);
      if (r != cudaSuccess) return r;
      // An imported pool is reachable from its own GPU only; this one may be another.
      cudaMemLocation here{};
      here.type = cudaMemLocationTypeDevice;
      here.id = ordinal_;
      cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
      if (cudaMemPoolGetAccess(&flags, pool, &here) != cudaSuccess ||
          flags != cudaMemAccessFlagsProtReadWrite) {
        cudaGetLastError();
        cudaMemAccessDesc access{};
        access.location = here;
        access.flags = cudaMemAccessFlagsProtReadWrite;
        r = cudaMemPoolSetAccess(pool, &access, 1);
      }
      if (r != cudaSuccess) cudaMemPoolDestroy(pool);
      return r;
    });
    if (e != cudaSuccess) {
      cudaGetLastError();
      return CudaFailed(e, fmt::format("importing the tensor pool of {}", from), ordinal_);
    }
    pool_it = pools_.emplace(pool_key, pool).first;
  }
  auto event_key = std::make_pair(handle.pid, handle.event);
  auto event_it = events_.find(event_key);
  cudaError_t e = OnDevice(ordinal_, [&] {
    cudaError_t r = cudaSuccess;
    if (event_it == events_.end()) {
      cudaIpcEventHandle_t eh;
      std::memcpy(&eh, handle.event.data(), sizeof eh);
      cudaEvent_t event = nullptr;
      if ((r = cudaIpcOpenEventHandle(&event, eh)) != cudaSuccess) return r;
      event_it = events_.emplace(event_key, event).first;
    }
    auto s = reinterpret_cast<cudaStream_t>(stream);
    r = cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event_it->second), 0);
    if (r != cudaSuccess || handle.bytes == 0) return r;
    cudaMemPoolPtrExportData exported;
    std::memcpy(&exported, handle.memory.data(), sizeof exported);
    void* imported = nullptr;
    r = cudaMemPoolImportPointer(&imported, static_cast<cudaMemPool_t>(pool_it->second), &exported);
    if (r != cudaSuccess) return r;
    r = cudaMemcpyAsync(dst, static_cast<char*>(imported) + handle.offset, handle.bytes,
                        cudaMemcpyDeviceToDevice, s);
    // The import goes after the copy, before the stream passes what tells the exporter it may
    // free the allocation (the importer's free must come first).
    cudaError_t freed = cudaFreeAsync(imported, s);
    return r != cudaSuccess ? r : freed;
  });
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaFailed(e, fmt::format("copying {} bytes by CUDA IPC from {}", handle.bytes, from),
                      ordinal_);
  }
  return Status::OK();
}

Status CudaIpcImporter::CopyOut(const CudaIpcHandle& handle, void* dst, CudaStream stream) {
  if (handle.pid == static_cast<int32_t>(getpid())) {
    return InvalidArgument(
        "gpu:{}: a CUDA IPC handle of this process ({}) is not opened by CUDA IPC", ordinal_,
        handle.pid);
  }
  MutexLock lock(mu_);
  if (handle.kind == CudaIpcHandle::kPool) return CopyOutOfPool(handle, dst, stream);
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

size_t CudaIpcImporter::open_pools() const {
  MutexLock lock(mu_);
  return pools_.size();
}

}  // namespace dflow
