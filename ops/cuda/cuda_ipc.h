// CUDA IPC between processes of one host: one process's GPU memory read by another's copy
// engine, without passing through host memory.
//
// The exporter copies a tensor (queued on the caller's stream, after the work that computes it)
// into a block of its own, allocated with cudaMalloc (memory of the stream-ordered pools cannot
// be exported this way), records an interprocess event after the copy, and hands out the
// block's memory handle, the tensor's offset and size, and the event's handle: a
// CudaIpcHandle, which travels in a message. The block is the peer's until the peer says it has
// copied out of it (Release): the exporter never frees or reuses memory a peer still reads.
//
// The importer opens each memory and event handle once and keeps it (a block is exported many
// times); its copy waits on the exporter's event on the importer's stream, so neither host
// waits for the other's GPU work.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"
#include "ops/cuda/cuda_stream.h"

namespace dflow {

// What a peer needs to read one exported tensor. Fixed-size wire form (Encode / Decode).
struct CudaIpcHandle {
  std::array<uint8_t, 64> memory{};  // cudaIpcMemHandle_t of the exporter's block
  std::array<uint8_t, 64> event{};   // cudaIpcEventHandle_t: passes when the data is there
  uint64_t offset = 0;               // of the tensor in the block
  uint64_t bytes = 0;
  uint64_t block = 0;  // the exporter's block number, for Release
  int32_t pid = 0;     // the exporting process

  static constexpr size_t kWireBytes = 64 + 64 + 8 * 3 + 4;
  std::string Encode() const;
  // InvalidArgument for bytes of the wrong size.
  static Result<CudaIpcHandle> Decode(std::string_view wire);
};

class CudaIpcExporter {
 public:
  // Unavailable naming the GPU when `ordinal` is not a GPU of this process.
  static Result<std::unique_ptr<CudaIpcExporter>> Create(int ordinal);
  // Frees the blocks (waiting for copies into them); a peer still holding one sees its memory
  // go when its process closes the handle.
  ~CudaIpcExporter();

  // Queues a copy of `bytes` at `data` (this GPU's memory) on `stream` into a free block,
  // the event recorded after it, and returns the handle. Host memory is not touched and the host
  // does not wait. ResourceExhausted naming the GPU when no block of that size can be had.
  Result<CudaIpcHandle> Export(const void* data, size_t bytes, CudaStream stream);
  // The peer has copied out of `block`: it may take the next export. InvalidArgument for a
  // block that is not out.
  Status Release(uint64_t block);

  int ordinal() const { return ordinal_; }
  size_t blocks() const;         // made so far
  size_t blocks_in_use() const;  // exported and not released

 private:
  struct Block;
  explicit CudaIpcExporter(int ordinal);
  int ordinal_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Block>> blocks_ DFLOW_GUARDED_BY(mu_);
};

class CudaIpcImporter {
 public:
  // Unavailable naming the GPU when `ordinal` is not a GPU of this process.
  static Result<std::unique_ptr<CudaIpcImporter>> Create(int ordinal);
  // Closes every handle it opened.
  ~CudaIpcImporter();

  // Queues on `stream` a wait for the exporter's event and a copy of the tensor into `dst`
  // (this GPU's memory, at least handle.bytes long). The exporter may be told to release the
  // block once `stream` has passed the copy. InvalidArgument for a handle of this process
  // (CUDA opens only other processes' handles); the CUDA error, naming the exporting process,
  // when a handle does not open.
  Status CopyOut(const CudaIpcHandle& handle, void* dst, CudaStream stream);

  size_t open_blocks() const;

 private:
  struct Opened;
  explicit CudaIpcImporter(int ordinal);
  int ordinal_;
  mutable Mutex mu_;
  // By exporting process and memory handle.
  std::map<std::pair<int32_t, std::array<uint8_t, 64>>, std::unique_ptr<Opened>> opened_
      DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
