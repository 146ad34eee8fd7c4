// CUDA IPC between processes of one host: one process's GPU memory read by another's copy
// engine, without passing through host memory. Two ways, chosen per tensor by the exporter:
//
//   pool   (one copy) The GPU's tensors come from a memory pool this process made exportable
//          (PrepareTensorPool: a pool whose shareable handle is a file descriptor, set as the
//          GPU's current pool, so CudaAllocator's cudaMallocAsync takes from it). The exporter
//          hands out the tensor's allocation itself (cudaMemPoolExportPointer) and an
//          interprocess event recorded after the work that computes it; the pool's descriptor
//          is offered once on this process's FdServer (framework/fd_passing.h), whose socket
//          path the handle carries. The importer fetches the descriptor once per exporting
//          process and GPU, imports the pool, and per transfer imports the allocation, waits on
//          the event on its own stream, copies out of it and frees its import there. The memory
//          is the sender's tensor: the sender keeps it until the peer has copied (Release).
//   block  (two copies) Otherwise (no exportable pool, DFLOW_CUDA_IPC_POOL=0, or memory not
//          from the pool): the exporter copies the tensor (queued on the caller's stream)
//          into a block of its own, allocated with cudaMalloc, records an interprocess event
//          after the copy and hands out the block's memory handle (cudaIpcGetMemHandle). The
//          block is the peer's until the peer has copied out of it (Release): the exporter never
//          frees or reuses memory a peer still reads.
//
// A CudaIpcHandle, which travels in a message, says which. The importer opens each memory,
// event and pool handle once and keeps it (a block or pool is exported many times); its copy
// waits on the exporter's event on the importer's stream, so neither host waits for the other's
// GPU work.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"
#include "ops/cuda/cuda_stream.h"

namespace dflow {

// Makes the memory CudaAllocator takes on GPU `ordinal` exportable by the pool way (above), once
// per process and GPU: where the GPU shares pools by file descriptor
// (cudaDevAttrMemoryPoolSupportedHandleTypes) and DFLOW_CUDA_IPC_POOL is not "0", a pool of its
// own becomes the GPU's current pool (where it cannot be made, the default pool stays and
// exports go the block way). Either way the current pool keeps freed memory up to
// `keep_bytes` (the threshold only rises: devices of one GPU share the pool, and one device's
// small limit must not make another's freed memory go back to the driver). Returns whether the
// pool is exportable; the CUDA error naming the GPU when the pool cannot be made or set.
Result<bool> PrepareTensorPool(int ordinal, size_t keep_bytes);

// What a peer needs to read one exported tensor. Wire form: Encode / Decode.
struct CudaIpcHandle {
  enum Kind : uint8_t { kBlock = 0, kPool = 1 };
  Kind kind = kBlock;
  // kBlock: the cudaIpcMemHandle_t of the exporter's block; kPool: the cudaMemPoolPtrExportData
  // of the tensor's allocation.
  std::array<uint8_t, 64> memory{};
  std::array<uint8_t, 64> event{};  // cudaIpcEventHandle_t: passes when the data is there
  uint64_t offset = 0;              // of the tensor in the block or allocation
  uint64_t bytes = 0;
  uint64_t block = 0;  // the exporter's block (kBlock) or event slot (kPool), for Release
  int32_t pid = 0;     // the exporting process
  int32_t pool = 0;    // kPool: the exporter's GPU, whose pool it offers under CudaPoolKey
  std::string socket;  // kPool: the exporter's FdServer (framework/fd_passing.h)

  static constexpr size_t kFixedWireBytes = 1 + 64 + 64 + 8 * 3 + 4 + 4 + 2;
  static constexpr size_t kMaxSocketBytes = 107;
  std::string Encode() const;
  // InvalidArgument for bytes that are not a handle: a wrong size, an unknown kind, a pool handle
  // without a socket, an offset and size that overflow.
  static Result<CudaIpcHandle> Decode(std::string_view wire);
};

// The key under which an exporting process offers GPU `ordinal`'s pool on its FdServer.
std::string CudaPoolKey(int ordinal);

class CudaIpcExporter {
 public:
  // Unavailable naming the GPU when `ordinal` is not a GPU of this process.
  static Result<std::unique_ptr<CudaIpcExporter>> Create(int ordinal);
  // Frees the blocks (waiting for copies into them); a peer still holding one sees its memory
  // go when its process closes the handle.
  ~CudaIpcExporter();

  // Exports the `bytes` at `data` (this GPU's memory) once the work queued on `stream` so far
  // has run; neither the host nor the stream waits. `allocation`: the start of the
  // cudaMallocAsync allocation holding `data`, where the caller knows it (null otherwise). With
  // one from an exportable pool the handle is of the pool way, and the memory must stay
  // allocated until Release; otherwise the bytes are copied on `stream` into a free block.
  // ResourceExhausted naming the GPU when no block of that size can be had.
  Result<CudaIpcHandle> Export(const void* data, size_t bytes, CudaStream stream,
                               const void* allocation = nullptr);
  // The peer has copied out of what `handle` exported: its block or event may serve the next
  // export. InvalidArgument for a handle that is not out.
  Status Release(const CudaIpcHandle& handle);

  int ordinal() const { return ordinal_; }
  size_t blocks() const;         // made so far
  size_t blocks_in_use() const;  // exported and not released
  size_t pool_exports() const;   // handles of the pool way handed out so far
  size_t events_in_use() const;  // of the pool way, exported and not released

 private:
  struct Block;
  struct Event;
  explicit CudaIpcExporter(int ordinal);
  // The pool way's handle, or an empty optional where it does not apply (then the block way).
  Result<std::optional<CudaIpcHandle>> ExportFromPool(const void* data, size_t bytes,
                                                      CudaStream stream, const void* allocation)
      DFLOW_REQUIRES(mu_);
  int ordinal_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Block>> blocks_ DFLOW_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Event>> events_ DFLOW_GUARDED_BY(mu_);
  size_t pool_exports_ DFLOW_GUARDED_BY(mu_) = 0;
};

class CudaIpcImporter {
 public:
  // Unavailable naming the GPU when `ordinal` is not a GPU of this process.
  static Result<std::unique_ptr<CudaIpcImporter>> Create(int ordinal);
  // Closes every handle it opened.
  ~CudaIpcImporter();

  // Queues on `stream` a wait for the exporter's event and a copy of the tensor into `dst`
  // (this GPU's memory, at least handle.bytes long); of the pool way, also the free of this
  // process's import of the allocation after the copy. The exporter may be told to release the
  // handle once `stream` has passed the copy. InvalidArgument for a handle of this process
  // (CUDA opens only other processes' handles); the error of fetching the pool's descriptor
  // (FetchFd, naming the exporter's socket), or the CUDA error naming the exporting process,
  // when a handle does not open.
  Status CopyOut(const CudaIpcHandle& handle, void* dst, CudaStream stream);

  size_t open_blocks() const;
  size_t open_pools() const;

 private:
  struct Opened;
  explicit CudaIpcImporter(int ordinal);
  Status CopyOutOfPool(const CudaIpcHandle& handle, void* dst, CudaStream stream)
      DFLOW_REQUIRES(mu_);
  int ordinal_;
  mutable Mutex mu_;
  // By exporting process and memory handle (blocks).
  std::map<std::pair<int32_t, std::array<uint8_t, 64>>, std::unique_ptr<Opened>> opened_
      DFLOW_GUARDED_BY(mu_);
  // By exporting process, socket and GPU: the imported pools (cudaMemPool_t).
  std::map<std::tuple<int32_t, std::string, int32_t>, void*> pools_ DFLOW_GUARDED_BY(mu_);
  // By exporting process and event handle: the pool way's opened events (cudaEvent_t).
  std::map<std::pair<int32_t, std::array<uint8_t, 64>>, void*> events_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
