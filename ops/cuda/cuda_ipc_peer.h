// A second process that reads GPU memory this one exports by CUDA IPC (ops/cuda/cuda_ipc.h), for
// the CUDA IPC test and benchmark: the program cuda_ipc_peer, started with pipes to its stdin
// and stdout, and the client that talks to it.
//
// Each request is one byte (kCopy, kCopyAndHash, kQuit), the length of a CudaIpcHandle's wire
// form (2 bytes) and the wire form; the peer copies the tensor into its own memory
// (CudaIpcImporter::CopyOut), waits for the copy, and replies with a CudaIpcReply: the FNV-1a
// hash of the bytes it copied when asked, and the error when the copy failed. The client then
// releases the handle.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "graph/status.h"
#include "ops/cuda/cuda_ipc.h"

namespace dflow::cuda {

enum CudaIpcRequest : uint8_t { kQuit = 0, kCopy = 1, kCopyAndHash = 2 };

struct CudaIpcReply {
  uint64_t hash = 0;
  int32_t code = 0;     // a StatusCode; 0 when the copy ran
  char message[244]{};  // the error's message, cut short
};

// FNV-1a over `bytes` bytes at `data` (host memory).
uint64_t Fnv1a(const void* data, size_t bytes);

class CudaIpcPeer {
 public:
  // Starts `program` (the cuda_ipc_peer executable) importing on GPU `ordinal`. Internal naming
  // the program when it cannot be started.
  static Result<std::unique_ptr<CudaIpcPeer>> Start(const std::string& program, int ordinal);
  // Tells the peer to quit and reaps it (killing it past a deadline).
  ~CudaIpcPeer();

  // Has the peer copy the exported tensor and waits for its reply (at most `deadline`):
  // the hash of what it copied when `hash`. DeadlineExceeded or Unavailable naming the peer's
  // pid when it does not answer; the peer's error as it reported it.
  Result<uint64_t> Copy(const CudaIpcHandle& handle, bool hash,
                        std::chrono::milliseconds deadline = std::chrono::seconds(60));

  pid_t pid() const { return pid_; }

 private:
  CudaIpcPeer(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  pid_t pid_;
  int to_, from_;  // pipes to its stdin and from its stdout
};

// The cuda_ipc_peer program's loop: serves requests on `in` until kQuit or end of file.
int RunCudaIpcPeer(int ordinal, int in, int out);

}  // namespace dflow::cuda
