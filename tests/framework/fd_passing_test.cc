// FdServer and FetchFd (framework/fd_passing.h): a memfd offered in this process is the same
// open file in another process (fd_fetch_peer writes through it, this process reads what it
// wrote); another user is refused by the server's own check; every error a peer can cause (no
// server, an unknown key, a silent server, a server that lies about descriptors or lengths, a
// client that says nothing) is an error naming the path and key, never a hang.
#include "framework/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "status_matchers.h"

extern char** environ;

namespace dflow {
namespace {

using testing::MessageHas;
using namespace std::chrono_literals;

std::string PeerBinary() {
  auto beside = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "fd_fetch_peer";
  return std::filesystem::exists(beside) ? beside.string() : std::string(FD_FETCH_PEER_BINARY);
}

// Runs fd_fetch_peer with `args`; its exit code and what it printed (killed after 20 s).
struct PeerRun {
  int code = -1;
  std::string out;
};
PeerRun RunPeer(std::vector<std::string> args) {
  const std::string log =
      (std::filesystem::temp_directory_path() / ("fd_fetch_peer." + std::to_string(getpid())))
          .string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  args.insert(args.begin(), PeerBinary());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  PeerRun run;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    run.out = "could not start " + args[0];
    return run;
  }
  posix_spawn_file_actions_destroy(&actions);
  const auto end = std::chrono::steady_clock::now() + 20s;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      run.out = "killed after 20 s";
      return run;
    }
    std::this_thread::sleep_for(5ms);
  }
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  run.out = text.str();
  std::filesystem::remove(log);
  return run;
}

// A memfd holding `value` in its first 8 bytes (16 bytes long).
UniqueFd MemfdWith(uint64_t value) {
  UniqueFd fd(memfd_create("fd_passing_test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(ftruncate(fd.get(), 16), 0);
  EXPECT_EQ(pwrite(fd.get(), &value, sizeof value, 0), 8);
  return fd;
}

uint64_t ReadAt(int fd, off_t offset) {
  uint64_t v = 0;
  EXPECT_EQ(pread(fd, &v, sizeof v, offset), 8);
  return v;
}

TEST(FdPassingTest, AMemfdOfferedHereIsTheSameFileInAnotherProcess) {
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint64_t value = 0x0123456789abcdefULL;
  UniqueFd memfd = MemfdWith(value);
  ASSERT_TRUE((*server)->Offer("pool/gpu:0", memfd.get()).ok());
  struct stat st {};
  ASSERT_EQ(stat((*server)->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << (*server)->path();

  PeerRun run = RunPeer({(*server)->path(), "pool/gpu:0"});
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_EQ(run.out, "ok " + std::to_string(value) + "\n");
  // The peer wrote through its descriptor into this process's file.
  EXPECT_EQ(ReadAt(memfd.get(), 8), ~value);
  EXPECT_EQ((*server)->served(), 1u);
  EXPECT_EQ((*server)->refused(), 0u);

  // A second offer under the key replaces the first.
  UniqueFd other = MemfdWith(7);
  ASSERT_TRUE((*server)->Offer("pool/gpu:0", other.get()).ok());
  run = RunPeer({(*server)->path(), "pool/gpu:0"});
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_EQ(run.out, "ok 7\n");
  EXPECT_EQ(ReadAt(other.get(), 8), ~uint64_t{7});
}

TEST(FdPassingTest, FetchedInThisProcessItIsANewDescriptorOfTheSameFile) {
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd memfd = MemfdWith(42);
  ASSERT_TRUE((*server)->Offer("k", memfd.get()).ok());
  memfd.reset();  // the server keeps its own duplicate
  auto got = FetchFd((*server)->path(), "k", 5s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(ReadAt(got->get(), 0), 42u);
  EXPECT_NE(fcntl(got->get(), F_GETFD) & FD_CLOEXEC, 0);
  auto again = FetchFd((*server)->path(), "k", 5s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  struct stat a {
  }, b{};
  ASSERT_EQ(fstat(got->get(), &a), 0);
  ASSERT_EQ(fstat(again->get(), &b), 0);
  EXPECT_NE(got->get(), again->get());
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ((*server)->served(), 2u);
}

TEST(FdPassingTest, AnUnknownKeyIsNotFoundNamingKeyAndPath) {
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto got = FetchFd((*server)->path(), "pool/gpu:3", 5s);
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(got.status(), {"'pool/gpu:3'", (*server)->path()}))
      << got.status().ToString();
  EXPECT_EQ((*server)->refused(), 1u);
  // From another process too.
  PeerRun run = RunPeer({(*server)->path(), "nothing"});
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.out.find("error NotFound"), std::string::npos) << run.out;
}

TEST(FdPassingTest, NoServerIsUnavailableNamingThePathAndTheServerFileGoesWithIt) {
  std::string path;
  {
    auto server = FdServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    path = (*server)->path();
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  auto got = FetchFd(path, "k", 5s);
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(got.status(), {path, "No such file"})) << got.status().ToString();
}

TEST(FdPassingTest, BadKeysPathsAndDescriptorsAreRefused) {
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd memfd = MemfdWith(1);
  EXPECT_EQ((*server)->Offer("", memfd.get()).code(), StatusCode::kInvalidArgument);
  Status too_long = (*server)->Offer(std::string(kMaxFdKeyBytes + 1, 'k'), memfd.get());
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(too_long, {"257"})) << too_long.ToString();
  Status closed = (*server)->Offer("k", 1 << 20);
  EXPECT_EQ(closed.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(closed, {"'k'", (*server)->path()})) << closed.ToString();

  EXPECT_EQ(FetchFd((*server)->path(), "", 1s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FetchFd("", "k", 1s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FetchFd(std::string(200, 'p'), "k", 1s).status().code(), StatusCode::kInvalidArgument);

  auto nowhere = FdServer::Start("/nonexistent/dir");
  EXPECT_EQ(nowhere.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(nowhere.status(), {"/nonexistent/dir/dflow-fds-"}))
      << nowhere.status().ToString();
  auto deep = FdServer::Start("/tmp/" + std::string(120, 'd'));
  EXPECT_EQ(deep.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(deep.status(), {"at most 107 bytes"})) << deep.status().ToString();
}

// A socket that listens at a path of the test's own and, per connection, does what the test says.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int)> on_connection)
      : path_((std::filesystem::temp_directory_path() /
               ("fd_fake." + std::to_string(getpid()) + "." + std::to_string(next_++)))
                  .string()),
        on_connection_(std::move(on_connection)) {
    listener_.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    unlink(path_.c_str());
    EXPECT_EQ(bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listener_.get(), 4), 0);
  }
  ~FakeServer() {
    if (thread_.joinable()) thread_.join();
    unlink(path_.c_str());
  }
  // Accepts one connection on a thread and runs the test's action on it.
  void AcceptOne() {
    thread_ = std::thread([this] {
      UniqueFd conn(accept(listener_.get(), nullptr, nullptr));
      if (conn.valid()) on_connection_(conn.get());
    });
  }
  const std::string& path() const { return path_; }

 private:
  static inline int next_ = 0;
  std::string path_;
  std::function<void(int)> on_connection_;
  UniqueFd listener_;
  std::thread thread_;
};

// Reads the 8 + key bytes of a request.
void ReadRequest(int conn) {
  char buf[512];
  (void)!recv(conn, buf, sizeof buf, 0);
}

// Sends a reply header (code, length) and `text`, with `fds` riding on it.
void SendReply(int conn, uint32_t code, uint32_t length, const std::string& text,
               const std::vector<int>& fds) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &code, 4);
  std::memcpy(out.data() + 4, &length, 4);
  out += text;
  iovec iov{out.data(), out.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  EXPECT_GT(sendmsg(conn, &msg, MSG_NOSIGNAL), 0);
}

TEST(FdPassingTest, ASilentServerIsADeadlineNamingThePath) {
  std::atomic<bool> done{false};
  FakeServer fake([&](int) {
    while (!done) std::this_thread::sleep_for(1ms);
  });
  fake.AcceptOne();
  const auto start = std::chrono::steady_clock::now();
  auto got = FetchFd(fake.path(), "k", 200ms);
  const auto took = std::chrono::steady_clock::now() - start;
  done = true;
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(got.status(), {fake.path(), "200 ms"})) << got.status().ToString();
  EXPECT_LT(took, 5s);
}

TEST(FdPassingTest, AServerThatHangsUpIsUnavailable) {
  FakeServer fake([](int conn) { ReadRequest(conn); });
  fake.AcceptOne();
  auto got = FetchFd(fake.path(), "k", 5s);
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(got.status(), {fake.path(), "hung up before it answered"}))
      << got.status().ToString();
}

TEST(FdPassingTest, RepliesThatLieAreRefusedAndWhatCameWithThemClosed) {
  UniqueFd a = MemfdWith(1), b = MemfdWith(2);
  struct Case {
    const char* what;
    uint32_t code, length;
    std::string text;
    std::vector<int> fds;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"OK without a descriptor", 0, 0, "", {}, "0 descriptors"},
      {"OK with two", 0, 0, "", {a.get(), b.get()}, "2 descriptors"},
      {"a code past the last", 99, 0, "", {}, "code 99"},
      {"a message too long", 2, 1u << 30, "", {}, "1073741824 bytes"},
      {"a message cut short", 2, 40, "short", {}, "hung up before it answered"},
  };
  for (const Case& c : cases) {
    FakeServer fake([&](int conn) {
      ReadRequest(conn);
      SendReply(conn, c.code, c.length, c.text, c.fds);
    });
    fake.AcceptOne();
    auto got = FetchFd(fake.path(), "k", 5s);
    EXPECT_FALSE(got.ok()) << c.what;
    EXPECT_TRUE(MessageHas(got.status(), {fake.path(), c.expect}))
        << c.what << ": " << got.status().ToString();
  }
  // An error the server gives arrives with its code and message.
  FakeServer refusing([](int conn) {
    ReadRequest(conn);
    SendReply(conn, static_cast<uint32_t>(StatusCode::kNotFound), 9, "no such k", {});
  });
  refusing.AcceptOne();
  auto got = FetchFd(refusing.path(), "k", 5s);
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "no such k");
}

// Connects to `path` and sends `bytes` (maybe nothing); the connection stays open until the
// returned descriptor goes.
UniqueFd ConnectAndSend(const std::string& path, const std::string& bytes) {
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  if (!bytes.empty()) {
    EXPECT_EQ(send(s.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  return s;
}

// Reads `n` bytes from the blocking `fd` (waiting at most 10 s for each piece).
bool RecvExactly(int fd, char* data, size_t n) {
  timeval limit{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  while (n > 0) {
    ssize_t r = recv(fd, data, n, 0);
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

TEST(FdPassingTest, AClientThatSaysNothingIsDroppedAndOthersAreServedAfterIt) {
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd memfd = MemfdWith(5);
  ASSERT_TRUE((*server)->Offer("k", memfd.get()).ok());
  UniqueFd silent = ConnectAndSend((*server)->path(), "");
  auto got = FetchFd((*server)->path(), "k", kFdRequestDeadline * 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(ReadAt(got->get(), 0), 5u);
  EXPECT_EQ((*server)->refused(), 1u);  // the silent one, dropped at its deadline

  // A malformed request is answered InvalidArgument.
  UniqueFd bad = ConnectAndSend((*server)->path(), std::string("XXXX\x01\0\0\0k", 9));
  char reply[8] = {};
  ASSERT_TRUE(RecvExactly(bad.get(), reply, sizeof reply));
  uint32_t code;
  std::memcpy(&code, reply, 4);
  EXPECT_EQ(code, static_cast<uint32_t>(StatusCode::kInvalidArgument));
}

TEST(FdPassingTest, AnotherUserIsRefusedByTheServer) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user takes root";
  auto server = FdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd memfd = MemfdWith(9);
  ASSERT_TRUE((*server)->Offer("k", memfd.get()).ok());
  // The socket file alone keeps others out...
  PeerRun run = RunPeer({(*server)->path(), "k", "65534"});
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.out.find("error Unavailable"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("Permission denied"), std::string::npos) << run.out;
  // ...and where it lets them in, the server's check does.
  ASSERT_EQ(chmod((*server)->path().c_str(), 0666), 0);
  run = RunPeer({(*server)->path(), "k", "65534"});
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.out.find("error PermissionDenied"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("not user 65534"), std::string::npos) << run.out;
  EXPECT_EQ((*server)->served(), 0u);
  EXPECT_EQ(ReadAt(memfd.get(), 8), 0u);
}

}  // namespace
}  // namespace dflow
