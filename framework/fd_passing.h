// File descriptors passed between processes of one host. Some handles are file descriptors and
// cannot travel in a message: a CUDA memory pool's shareable handle (ops/cuda/cuda_ipc.h), a
// memfd. An FdServer offers descriptors under keys on a Unix socket of its own; FetchFd, in
// another process, connects to it and receives a duplicate of one (SCM_RIGHTS). The socket's
// path is what travels in messages.
//
// Only processes of the server's own user are served: the socket file is the user's alone (mode
// 0600), and the server checks each peer's credentials (SO_PEERCRED) before it answers. Every
// byte from the other side is untrusted: the request's and reply's lengths are bounded and
// checked, a reply carrying more than one descriptor or one where none belongs is refused (and
// what came with it closed). Nothing waits unbounded: FetchFd waits at most its deadline, and the
// server drops a peer that has not sent its whole request within kFdRequestDeadline.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "graph/mutex.h"
#include "graph/status.h"

namespace dflow {

// An owned file descriptor, closed when it goes. -1: none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

inline constexpr size_t kMaxFdKeyBytes = 256;
inline constexpr std::chrono::milliseconds kFdRequestDeadline{2000};

class FdServer {
 public:
  // Listens on a new socket in `dir` ("": $XDG_RUNTIME_DIR where it is a directory, else
  // /tmp) and serves from a thread of its own. Unavailable naming the path and the system's
  // error when it cannot listen there (a path longer than a socket's 107 bytes among them).
  static Result<std::unique_ptr<FdServer>> Start(const std::string& dir = "");
  // Stops serving (a request being answered is cut short), closes the socket and every offered
  // descriptor, and removes the socket file.
  ~FdServer();

  // Offers a duplicate of `fd` under `key`, replacing what the key offered before; the caller
  // keeps `fd`. InvalidArgument for an empty key or one over kMaxFdKeyBytes, or a descriptor that
  // does not duplicate.
  Status Offer(const std::string& key, int fd);

  const std::string& path() const { return path_; }
  // Descriptors handed out, and requests answered with an error (unknown key, another user, a
  // malformed or unfinished request), so far.
  size_t served() const;
  size_t refused() const;

 private:
  FdServer(std::string path, UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write);
  void Serve();
  // Answers one connected peer (bounded by kFdRequestDeadline).
  void Answer(int conn);

  const std::string path_;
  UniqueFd listener_;
  UniqueFd wake_read_, wake_write_;  // a byte on wake_write_ stops Serve
  std::thread thread_;
  mutable Mutex mu_;
  std::map<std::string, UniqueFd> offered_ DFLOW_GUARDED_BY(mu_);
  size_t served_ DFLOW_GUARDED_BY(mu_) = 0;
  size_t refused_ DFLOW_GUARDED_BY(mu_) = 0;
};

// The descriptor the server listening at `path` offers under `key`, duplicated into this process
// (close-on-exec). NotFound, naming the key and path, when the server offers no such key;
// PermissionDenied when it refuses this process's user; Unavailable naming the path when nothing
// listens there or the server hangs up before it answers; DeadlineExceeded naming the path when
// no answer comes within `deadline`; InvalidArgument for a key the server would not take and for a
// malformed reply (too long, a descriptor missing or more than one).
Result<UniqueFd> FetchFd(const std::string& path, std::string_view key,
                         std::chrono::milliseconds deadline);

}  // namespace dflow
