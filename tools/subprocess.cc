#include "tools/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace dflow::tools {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Both ends of a pipe, closed when it goes out of scope.
struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    Close(0);
    Close(1);
  }
  void Close(int end) {
    if (fd[end] >= 0) close(fd[end]);
    fd[end] = -1;
  }
};

// Blocks SIGPIPE in this thread while the child's stdin is written, so a child that exits
// without reading gives EPIPE instead of ending this process; a SIGPIPE raised meanwhile is
// consumed before the mask is restored.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace

std::optional<std::string> FindProgram(const std::string& program,
                                       std::optional<std::string> path) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) {
    if (IsExecutableFile(program)) return program;
    return std::nullopt;
  }
  if (!path) {
    const char* env = std::getenv("PATH");
    path = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  }
  size_t begin = 0;
  while (true) {
    size_t end = path->find(':', begin);
    std::string dir = path->substr(begin, end == std::string::npos ? end : end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;  // "" is the cwd
    if (IsExecutableFile(candidate)) return candidate;
    if (end == std::string::npos) return std::nullopt;
    begin = end + 1;
  }
}

Result<ProgramResult> RunProgram(const std::vector<std::string>& argv, std::string_view input,
                                 bool merge_stderr) {
  std::optional<std::string> binary = FindProgram(argv.at(0));
  if (!binary) return NotFound("program '{}' is not on PATH", argv[0]);
  Pipe in, out, err;
  for (Pipe* p : {&in, &out, &err}) {
    if (pipe2(p->fd, O_CLOEXEC) != 0) {
      return Internal("cannot run '{}': pipe: {}", argv[0], std::strerror(errno));
    }
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, merge_stderr ? out.fd[1] : err.fd[1], STDERR_FILENO);
  // The child starts with no signals blocked and SIGPIPE at its default, whatever this
  // process has set.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &pipe_only);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary->c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Internal("cannot run '{}' ({}): {}", argv[0], *binary, std::strerror(rc));
  in.Close(0);
  out.Close(1);
  err.Close(1);
  fcntl(in.fd[1], F_SETFL, fcntl(in.fd[1], F_GETFL) | O_NONBLOCK);

  ProgramResult result;
  size_t written = 0;
  if (input.empty()) in.Close(1);
  {
    SigpipeBlock block;
    char buf[1 << 16];
    while (in.fd[1] >= 0 || out.fd[0] >= 0 || err.fd[0] >= 0) {
      pollfd fds[3] = {{in.fd[1], POLLOUT, 0}, {out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
      if (poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents != 0) {
        ssize_t n = write(in.fd[1], input.data() + written, input.size() - written);
        if (n > 0) written += static_cast<size_t>(n);
        // Done, or the child closed its stdin (EPIPE): either way nothing more goes to it.
        if (written == input.size() || (n < 0 && errno != EAGAIN && errno != EINTR)) in.Close(1);
      }
      for (int k : {1, 2}) {
        if (fds[k].revents == 0) continue;
        Pipe& p = k == 1 ? out : err;
        ssize_t n = read(p.fd[0], buf, sizeof(buf));
        if (n > 0) {
          (k == 1 ? result.out : result.err).append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          p.Close(0);
        }
      }
    }
    in.Close(1);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Internal("waiting for '{}': {}", argv[0], std::strerror(errno));
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace dflow::tools
