#include "framework/fd_passing.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace dflow {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

namespace {

using Clock = std::chrono::steady_clock;

// The request: magic, the key's length, the key. The reply: a StatusCode, the message's length,
// the message; the descriptor rides on the reply's first byte when the code is OK.
constexpr char kMagic[4] = {'D', 'F', 'F', 'D'};
constexpr size_t kRequestHeader = 8;
constexpr size_t kReplyHeader = 8;
constexpr uint32_t kMaxReplyMessage = 512;
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
constexpr std::chrono::milliseconds kFdLinger{200};

std::string Errno(int e) { return fmt::format("{} ({})", std::strerror(e), e); }

// Waits until `fd` is ready for `events` or `deadline` passes. False on the deadline.
bool WaitReady(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
    if (r > 0) return true;  // ready, or an error / hang-up the next call reports
    if (r < 0 && errno != EINTR) return true;
  }
}

// How a transfer on a non-blocking socket ended.
enum class Io { kDone, kHungUp, kDeadline, kFailed };

// Sends all of `data` on `fd` by `deadline`, `pass` (a descriptor; -1: none) riding on the first
// byte. kFailed with `error` set when the socket fails.
Io SendAll(int fd, const char* data, size_t n, Clock::time_point deadline, int pass,
           std::string* error) {
  while (n > 0) {
    iovec iov{const_cast<char*>(data), n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (pass >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass, sizeof pass);
    }
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w > 0) {
      pass = -1;  // gone with the first byte
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitReady(fd, POLLOUT, deadline)) return Io::kDeadline;
      continue;
    }
    *error = Errno(errno);
    return Io::kFailed;
  }
  return Io::kDone;
}

// Reads exactly `n` bytes from `fd` by `deadline`, keeping every descriptor that arrives with
// them in `fds` (none taken when null). kFailed with `error` set when the socket fails.
Io ReadAll(int fd, char* data, size_t n, Clock::time_point deadline, std::vector<UniqueFd>* fds,
           std::string* error) {
  while (n > 0) {
    iovec iov{data, n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = fds != nullptr ? control : nullptr;
    msg.msg_controllen = fds != nullptr ? sizeof control : 0;
    ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitReady(fd, POLLIN, deadline)) return Io::kDeadline;
      continue;
    }
    if (r < 0) {
      *error = Errno(errno);
      return Io::kFailed;
    }
    if (fds != nullptr) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int got;
          std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
          fds->emplace_back(got);
        }
      }
      if ((msg.msg_flags & MSG_CTRUNC) != 0) fds->emplace_back(-1);  // more came than fit
    }
    if (r == 0) return Io::kHungUp;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return Io::kDone;
}

// The address of the socket at `path`. REQUIRES: path.size() <= kMaxSocketPath.
sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

std::string DefaultDir() {
  if (const char* run = std::getenv("XDG_RUNTIME_DIR"); run != nullptr && *run != '\0') {
    struct stat st {};
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode) && access(run, W_OK | X_OK) == 0) return run;
  }
  return "/tmp";
}

void PutU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

FdServer::FdServer(std::string path, UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write)
    : path_(std::move(path)),
      listener_(std::move(listener)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)) {
  thread_ = std::thread([this] { Serve(); });
}

Result<std::unique_ptr<FdServer>> FdServer::Start(const std::string& dir) {
  static std::atomic<uint64_t> counter{0};
  const std::string where = dir.empty() ? DefaultDir() : dir;
  const std::string path = fmt::format("{}/dflow-fds-{}-{}-{:08x}.sock", where, getpid(), counter++,
                                       static_cast<uint32_t>(std::random_device{}()));
  if (path.size() > kMaxSocketPath) {
    return Unavailable("cannot serve descriptors at '{}': a socket's path is at most {} bytes",
                       path, kMaxSocketPath);
  }
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) {
    return Unavailable("cannot serve descriptors at '{}': socket: {}", path, Errno(errno));
  }
  const sockaddr_un addr = UnixAddress(path);
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Unavailable("cannot serve descriptors at '{}': bind: {}", path, Errno(errno));
  }
  if (chmod(path.c_str(), 0600) != 0 || listen(listener.get(), 64) != 0) {
    const int e = errno;
    unlink(path.c_str());
    return Unavailable("cannot serve descriptors at '{}': {}", path, Errno(e));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int e = errno;
    unlink(path.c_str());
    return Unavailable("cannot serve descriptors at '{}': pipe: {}", path, Errno(e));
  }
  return std::unique_ptr<FdServer>(
      new FdServer(path, std::move(listener), UniqueFd(wake[0]), UniqueFd(wake[1])));
}

FdServer::~FdServer() {
  const char stop = 1;
  while (write(wake_write_.get(), &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  unlink(path_.c_str());
}

Status FdServer::Offer(const std::string& key, int fd) {
  if (key.empty() || key.size() > kMaxFdKeyBytes) {
    return InvalidArgument("a descriptor's key is 1 to {} bytes, not {}", kMaxFdKeyBytes,
                           key.size());
  }
  UniqueFd copy(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) {
    return InvalidArgument("descriptor {} offered under '{}' at '{}' does not duplicate: {}", fd,
                           key, path_, Errno(errno));
  }
  MutexLock lock(mu_);
  offered_[key] = std::move(copy);
  return Status::OK();
}

size_t FdServer::served() const {
  MutexLock lock(mu_);
  return served_;
}

size_t FdServer::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

void FdServer::Serve() {
  while (true) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    int r = poll(p, 2, -1);  // woken by the destructor's byte
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) continue;
    Answer(conn.get());
    // Closing with the peer's bytes unread would reset the connection and could lose the reply
    // for it: stop writing, then read what is left until the peer closes (at most kFdLinger).
    shutdown(conn.get(), SHUT_WR);
    const auto linger_end = Clock::now() + kFdLinger;
    char sink[256];
    while (WaitReady(conn.get(), POLLIN, linger_end)) {
      ssize_t got = recv(conn.get(), sink, sizeof sink, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }
}

void FdServer::Answer(int conn) {
  const auto deadline = Clock::now() + kFdRequestDeadline;
  auto count = [this](bool served) {
    MutexLock lock(mu_);
    (served ? served_ : refused_)++;
  };
  auto reply = [&](StatusCode code, const std::string& message, int fd) {
    std::string out(kReplyHeader, '\0');
    PutU32(out.data(), static_cast<uint32_t>(code));
    const std::string text = message.substr(0, kMaxReplyMessage);
    PutU32(out.data() + 4, static_cast<uint32_t>(text.size()));
    out += text;
    count(code == StatusCode::kOk);
    std::string error;
    (void)SendAll(conn, out.data(), out.size(), deadline, fd, &error);  // a peer gone is its loss
  };

  ucred peer{};
  socklen_t len = sizeof peer;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != geteuid()) {
    reply(StatusCode::kPermissionDenied,
          fmt::format("the descriptor server at '{}' serves user {} only, not user {}", path_,
                      geteuid(), peer.uid),
          -1);
    return;
  }
  char header[kRequestHeader];
  std::string error;
  if (ReadAll(conn, header, sizeof header, deadline, nullptr, &error) != Io::kDone) {
    count(false);  // gone, silent or broken: nobody to answer
    return;
  }
  const uint32_t key_bytes = GetU32(header + 4);
  if (std::memcmp(header, kMagic, 4) != 0 || key_bytes == 0 || key_bytes > kMaxFdKeyBytes) {
    reply(StatusCode::kInvalidArgument,
          fmt::format("a malformed request to the descriptor server at '{}'", path_), -1);
    return;
  }
  std::string key(key_bytes, '\0');
  if (ReadAll(conn, key.data(), key.size(), deadline, nullptr, &error) != Io::kDone) {
    count(false);
    return;
  }
  UniqueFd fd;  // a duplicate: an Offer may replace (and close) the key's descriptor meanwhile
  {
    MutexLock lock(mu_);
    auto it = offered_.find(key);
    if (it != offered_.end()) fd.reset(fcntl(it->second.get(), F_DUPFD_CLOEXEC, 0));
  }
  if (!fd.valid()) {
    reply(StatusCode::kNotFound,
          fmt::format("the descriptor server at '{}' offers nothing under '{}'", path_, key), -1);
    return;
  }
  reply(StatusCode::kOk, "", fd.get());
}

Result<UniqueFd> FetchFd(const std::string& path, std::string_view key,
                         std::chrono::milliseconds deadline_after) {
  if (key.empty() || key.size() > kMaxFdKeyBytes) {
    return InvalidArgument("a descriptor's key is 1 to {} bytes, not {} (asking '{}')",
                           kMaxFdKeyBytes, key.size(), path);
  }
  if (path.empty() || path.size() > kMaxSocketPath) {
    return InvalidArgument("'{}' is not a descriptor server's socket: a path of 1 to {} bytes",
                           path, kMaxSocketPath);
  }
  const auto deadline = Clock::now() + deadline_after;
  UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) {
    return Unavailable("cannot ask the descriptor server at '{}': socket: {}", path, Errno(errno));
  }
  const sockaddr_un addr = UnixAddress(path);
  while (connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN && Clock::now() < deadline) {  // its backlog is full: try again
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (errno == EAGAIN) {
      return DeadlineExceeded("the descriptor server at '{}' took no connection within {} ms", path,
                              deadline_after.count());
    }
    return Unavailable("no descriptor server listens at '{}': {}", path, Errno(errno));
  }
  std::string request(kRequestHeader, '\0');
  std::memcpy(request.data(), kMagic, 4);
  PutU32(request.data() + 4, static_cast<uint32_t>(key.size()));
  request.append(key);
  // A server that refuses may answer and hang up before the request is all written: its answer
  // is read even then.
  std::string write_error;
  const Io wrote = SendAll(sock.get(), request.data(), request.size(), deadline, -1, &write_error);
  if (wrote == Io::kDeadline) {
    return DeadlineExceeded("the descriptor server at '{}' took no request within {} ms", path,
                            deadline_after.count());
  }
  std::vector<UniqueFd> fds;
  char header[kReplyHeader];
  std::string error;
  auto failed = [&](Io got) -> Status {
    if (wrote == Io::kFailed) {
      return Unavailable("the descriptor server at '{}' hung up: {}", path, write_error);
    }
    if (got == Io::kHungUp) {
      return Unavailable("the descriptor server at '{}' hung up before it answered", path);
    }
    if (got == Io::kDeadline) {
      return DeadlineExceeded("the descriptor server at '{}' did not answer within {} ms", path,
                              deadline_after.count());
    }
    return Unavailable("reading from the descriptor server at '{}': {}", path, error);
  };
  if (Io got = ReadAll(sock.get(), header, sizeof header, deadline, &fds, &error);
      got != Io::kDone) {
    return failed(got);
  }
  const uint32_t code = GetU32(header);
  const uint32_t message_bytes = GetU32(header + 4);
  if (code > static_cast<uint32_t>(kMaxStatusCode) || message_bytes > kMaxReplyMessage) {
    return InvalidArgument(
        "a malformed reply from the descriptor server at '{}' (code {}, a message of {} bytes)",
        path, code, message_bytes);
  }
  std::string message(message_bytes, '\0');
  if (Io got = ReadAll(sock.get(), message.data(), message.size(), deadline, &fds, &error);
      got != Io::kDone) {
    return failed(got);
  }
  if (code != 0) {
    if (message.empty()) message = fmt::format("the descriptor server at '{}' refused", path);
    return Status(static_cast<StatusCode>(code), message);
  }
  if (fds.size() != 1 || !fds[0].valid()) {
    return InvalidArgument(
        "a malformed reply from the descriptor server at '{}' for '{}': {} descriptors, not 1",
        path, key, fds.size());
  }
  return std::move(fds[0]);
}

}  // namespace dflow
