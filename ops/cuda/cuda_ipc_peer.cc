#include "ops/cuda/cuda_ipc_peer.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

extern char** environ;

namespace dflow::cuda {
namespace {

// Reads exactly `n` bytes before `until`; false at end of file, on an error or past it.
bool ReadFull(int fd, void* buf, size_t n, std::chrono::steady_clock::time_point until,
              bool* timed_out = nullptr) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (timed_out != nullptr) *timed_out = true;
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFull(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

constexpr auto kForever = std::chrono::hours(24 * 365);

}  // namespace

uint64_t Fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Result<std::unique_ptr<CudaIpcPeer>> CudaIpcPeer::Start(const std::string& program, int ordinal) {
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0) return Internal("cuda_ipc_peer: pipe: {}", std::strerror(errno));
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    return Internal("cuda_ipc_peer: pipe: {}", std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from[1], 1);
  std::string ord = std::to_string(ordinal);
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), ord.data(), nullptr};
  pid_t pid = -1;
  int e = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to[0]);
  close(from[1]);
  if (e != 0) {
    close(to[1]);
    close(from[0]);
    return Internal("cannot start '{}': {}", program, std::strerror(e));
  }
  return std::unique_ptr<CudaIpcPeer>(new CudaIpcPeer(pid, to[1], from[0]));
}

CudaIpcPeer::~CudaIpcPeer() {
  uint8_t quit = kQuit;
  WriteFull(to_, &quit, 1);
  close(to_);
  close(from_);
  for (int i = 0; i < 100; ++i) {  // 10 s, then kill
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    usleep(100000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

Result<uint64_t> CudaIpcPeer::Copy(const CudaIpcHandle& handle, bool hash,
                                   std::chrono::milliseconds deadline) {
  const std::string wire = handle.Encode();
  const auto length = static_cast<uint16_t>(wire.size());
  std::string request(1, static_cast<char>(hash ? kCopyAndHash : kCopy));
  request.append(reinterpret_cast<const char*>(&length), sizeof length);
  request += wire;
  if (!WriteFull(to_, request.data(), request.size())) {
    return Unavailable("cuda_ipc_peer (pid {}) stopped reading: {}", pid_, std::strerror(errno));
  }
  CudaIpcReply reply;
  bool timed_out = false;
  if (!ReadFull(from_, &reply, sizeof reply, std::chrono::steady_clock::now() + deadline,
                &timed_out)) {
    if (timed_out) {
      return DeadlineExceeded("cuda_ipc_peer (pid {}) did not answer in {} ms", pid_,
                              deadline.count());
    }
    return Unavailable("cuda_ipc_peer (pid {}) closed its output", pid_);
  }
  if (reply.code != 0) {
    reply.message[sizeof reply.message - 1] = '\0';
    return Status(static_cast<StatusCode>(reply.code),
                  fmt::format("cuda_ipc_peer (pid {}): {}", pid_, reply.message));
  }
  return reply.hash;
}

int RunCudaIpcPeer(int ordinal, int in, int out) {
  auto reply_with = [out](const Status& s, uint64_t hash) {
    CudaIpcReply r;
    r.hash = hash;
    r.code = static_cast<int32_t>(s.code());
    std::strncpy(r.message, s.message().c_str(), sizeof r.message - 1);
    return WriteFull(out, &r, sizeof r);
  };
  auto importer = CudaIpcImporter::Create(ordinal);
  cudaStream_t stream = nullptr;
  void* dst = nullptr;
  size_t dst_size = 0;
  if (importer.ok()) {
    cudaSetDevice(ordinal);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  std::string wire;
  for (;;) {
    uint8_t op = kQuit;
    uint16_t length = 0;
    if (!ReadFull(in, &op, 1, std::chrono::steady_clock::now() + kForever) || op == kQuit) break;
    if (!ReadFull(in, &length, sizeof length, std::chrono::steady_clock::now() + kForever) ||
        length > CudaIpcHandle::kFixedWireBytes + CudaIpcHandle::kMaxSocketBytes) {
      break;  // not a client of this program
    }
    wire.assign(length, '\0');
    if (!ReadFull(in, wire.data(), wire.size(), std::chrono::steady_clock::now() + kForever)) {
      break;
    }
    auto handle = CudaIpcHandle::Decode(wire);
    if (!importer.ok() || !handle.ok()) {
      if (!reply_with(importer.ok() ? handle.status() : importer.status(), 0)) break;
      continue;
    }
    Status s;
    uint64_t hash = 0;
    if (handle->bytes > dst_size) {
      if (dst != nullptr) cudaFree(dst);
      dst = nullptr;
      dst_size = 0;
      if (cudaMalloc(&dst, handle->bytes) == cudaSuccess) dst_size = handle->bytes;
    }
    if (handle->bytes > dst_size) {
      s = ResourceExhausted("gpu:{}: no memory for {} bytes", ordinal, handle->bytes);
    } else {
      s = (*importer)->CopyOut(*handle, dst, reinterpret_cast<CudaStream>(stream));
    }
    if (s.ok() && cudaStreamSynchronize(stream) != cudaSuccess) {
      s = Internal("gpu:{}: the copy failed: {}", ordinal, cudaGetErrorString(cudaGetLastError()));
    }
    if (s.ok() && op == kCopyAndHash) {
      std::vector<char> host(handle->bytes);
      if (cudaMemcpy(host.data(), dst, handle->bytes, cudaMemcpyDeviceToHost) == cudaSuccess) {
        hash = Fnv1a(host.data(), host.size());
      } else {
        s = Internal("gpu:{}: copying out to the host failed", ordinal);
      }
    }
    if (!reply_with(s, hash)) break;
  }
  if (dst != nullptr) cudaFree(dst);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return 0;
}

}  // namespace dflow::cuda
