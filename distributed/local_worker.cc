#include "distributed/local_worker.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace dflow::distributed {

Result<std::unique_ptr<LocalWorker>> LocalWorker::Start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::string& listen,
                                                        const std::vector<std::string>& wrapper,
                                                        bool heartbeat) {
  int out[2];
  if (pipe(out) != 0) return Internal("cannot start {}: no pipe", binary);
  int beat[2] = {-1, -1};
  if (heartbeat && pipe2(beat, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Internal("cannot start {}: no pipe", binary);
  }
  std::vector<std::string> all = wrapper;
  all.insert(all.end(), {binary, "--listen", listen});
  if (heartbeat) all.insert(all.end(), {"--heartbeat-fd", "3"});
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  if (heartbeat) posix_spawn_file_actions_adddup2(&actions, beat[1], 3);  // dup2 clears CLOEXEC
  auto worker = std::unique_ptr<LocalWorker>(new LocalWorker);
  if (heartbeat) {
    worker->heartbeat_fd_ = beat[0];
    fcntl(beat[0], F_SETFL, O_NONBLOCK);
    worker->last_beat_ = std::chrono::steady_clock::now();
  }
  int rc = wrapper.empty()
               ? posix_spawn(&worker->pid_, binary.c_str(), &actions, nullptr, argv.data(), environ)
               : posix_spawnp(&worker->pid_, wrapper[0].c_str(), &actions, nullptr, argv.data(),
                              environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (heartbeat) close(beat[1]);
  if (rc != 0) {
    close(out[0]);
    worker->pid_ = -1;
    return Internal("cannot start {}: {}", binary, std::strerror(rc));
  }
  std::string line;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < until) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const std::string prefix = "listening on ";
  if (line.rfind(prefix, 0) != 0 || line.find('\n') == std::string::npos) {
    return Internal("{} printed no 'listening on HOST:PORT' line (got '{}')", binary, line);
  }
  worker->address_ = line.substr(prefix.size(), line.find('\n') - prefix.size());
  return worker;
}

LocalWorker::~LocalWorker() {
  Stop(SIGTERM);
  if (heartbeat_fd_ >= 0) close(heartbeat_fd_);
}

double LocalWorker::SecondsSinceHeartbeat() {
  if (heartbeat_fd_ < 0) return 0;
  char buf[64];
  while (read(heartbeat_fd_, buf, sizeof(buf)) > 0) last_beat_ = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last_beat_).count();
}

std::optional<int> LocalWorker::Exited() {
  if (pid_ <= 0) return -1;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  return status;
}

int LocalWorker::Stop(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

Result<std::string> WriteTokenFile(const std::string& dir, const std::string& token) {
  static std::atomic<int> n{0};
  std::string path = fmt::format("{}/dflow_token_{}_{}", dir, getpid(), n++);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Internal("cannot write the token file '{}'", path);
  ::fchmod(fd, 0600);  // also when the file was there before with a wider mode
  std::string text = token + "\n";
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return Internal("cannot write the token file '{}'", path);
  return path;
}

Result<std::string> ReadTokenFile(const std::string& path) {
  // As ssh treats a private key: a secret other users can read is refused, not used.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("cannot read the token file '{}': {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument("the token file '{}' is not a file", path);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return PermissionDenied(
        "the token file '{}' is open to other users (mode {:04o}); a cluster's secret must be "
        "readable by its owner only: chmod 600 '{}'",
        path, st.st_mode & 07777, path);
  }
  constexpr off_t kMaxTokenBytes = 4096;
  if (st.st_size > kMaxTokenBytes) {
    return InvalidArgument("the token file '{}' is {} bytes, more than a token's {}", path,
                           st.st_size, kMaxTokenBytes);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read the token file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = ss.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return InvalidArgument("the token file '{}' is empty", path);
  return token;
}

}  // namespace dflow::distributed
