// The second process of the descriptor-passing test (tests/framework/fd_passing_test.cc):
//   fd_fetch_peer PATH KEY [UID]
// becomes user UID when given (the test runs it as another user), fetches the descriptor KEY from
// the FdServer at PATH (framework/fd_passing.h), reads the 8 bytes at offset 0 of the file it
// names and writes their bitwise complement at offset 8, so the test sees the same file, not a
// copy. Prints "ok <value>" and exits 0, or "error <code>: <message>" and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/fd_passing.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: fd_fetch_peer PATH KEY [UID]\n");
    return 2;
  }
  if (argc == 4) {
    const auto uid = static_cast<uid_t>(std::strtoul(argv[3], nullptr, 10));
    if (setgid(uid) != 0 || setuid(uid) != 0) {
      std::printf("error setuid: cannot become user %u\n", static_cast<unsigned>(uid));
      return 1;
    }
  }
  auto fd = dflow::FetchFd(argv[1], argv[2], std::chrono::seconds(10));
  if (!fd.ok()) {
    std::printf("error %s: %s\n", std::string(dflow::StatusCodeName(fd.status().code())).c_str(),
                fd.status().message().c_str());
    return 1;
  }
  uint64_t value = 0;
  if (pread(fd->get(), &value, sizeof value, 0) != sizeof value) {
    std::printf("error read: the descriptor's file has no 8 bytes\n");
    return 1;
  }
  const uint64_t back = ~value;
  if (pwrite(fd->get(), &back, sizeof back, 8) != sizeof back) {
    std::printf("error write: the descriptor's file took no write\n");
    return 1;
  }
  std::printf("ok %llu\n", static_cast<unsigned long long>(value));
  return 0;
}
