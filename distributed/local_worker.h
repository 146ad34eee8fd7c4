// LocalWorker: a dflow-worker child process on this host, for tests, benchmarks and examples
// that run a cluster on one machine. Started with its flags, it is ready once it has printed
// its "listening on HOST:PORT" line; destroying it stops it with SIGTERM and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"

namespace dflow::distributed {

class LocalWorker {
 public:
  // Starts `binary` with "--listen `listen`" and `args`, and waits (at most 20 s) for its line.
  // `wrapper`, when given, is the command that runs it (found on PATH), e.g. {"ip", "netns",
  // "exec", "ns1"} to start it in a network namespace. Internal naming the binary when it cannot
  // start or prints no address.
  // `heartbeat`: the worker gets "--heartbeat-fd 3", a pipe it writes a byte to four times a
  // second, read here by SecondsSinceHeartbeat.
  static Result<std::unique_ptr<LocalWorker>> Start(const std::string& binary,
                                                    const std::vector<std::string>& args,
                                                    const std::string& listen = "127.0.0.1:0",
                                                    const std::vector<std::string>& wrapper = {},
                                                    bool heartbeat = false);
  ~LocalWorker();
  LocalWorker(const LocalWorker&) = delete;
  LocalWorker& operator=(const LocalWorker&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and reaps it (SIGKILL after 5 s); its wait status, -1 when already reaped.
  int Stop(int sig);
  // Its wait status once it has ended (reaped here), without waiting; nullopt while it runs.
  std::optional<int> Exited();
  // Started with a heartbeat: seconds since its last beat (since the start before the first);
  // a stopped or hung process's count grows. 0 without one.
  double SecondsSinceHeartbeat();

 private:
  LocalWorker() = default;
  pid_t pid_ = -1;
  int heartbeat_fd_ = -1;  // the pipe's read end, non-blocking
  std::chrono::steady_clock::time_point last_beat_;
  std::string address_;
};

// Writes `token` to a new file under `dir` readable only by this user; its path.
Result<std::string> WriteTokenFile(const std::string& dir, const std::string& token);
// The token in the file at `path` (its first line's end dropped). NotFound when it cannot be
// read; PermissionDenied when its group or other users have any access to it (as ssh refuses
// such a key), saying to chmod 600; InvalidArgument when it is empty, not a file or over 4 KiB;
// each names the file.
Result<std::string> ReadTokenFile(const std::string& path);

}  // namespace dflow::distributed
