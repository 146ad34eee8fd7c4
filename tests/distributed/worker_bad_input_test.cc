// A live dflow-worker (tools/dflow_worker.cc) sent what no dflow process sends: a handshake of
// another protocol version, garbage and truncated headers, sizes that lie, payloads that are
// not requests, a partition with an op nobody knows. Each ends in a clear error (a refusal or a
// reply that says why, or a line in the worker's log) and the worker then serves a real session.
//
// The bad messages come from RawPeer, a UCX client written here that speaks the wire protocol
// (transport/wire.h) by hand, so nothing on the sending side checks them.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "distributed/messages.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "serialization/graph_file.h"
#include "status_matchers.h"
#include "tools/subprocess.h"
#include "transport/ucx/hmac.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx/wire.h"

namespace dflow::distributed {
namespace {

using testing::MessageHas;
using namespace std::chrono_literals;
namespace wire = transport;

constexpr char kBadInputToken[] = "bad-input-test-token";
constexpr char kWorkerTask[] = "/job:worker/task:0";

// One message a RawPeer received.
struct Received {
  uint16_t type = 0;
  std::string header;
  std::string payload;
};

// A UCX client with one endpoint to a listener, driven from the test's thread: every wait
// progresses the worker until its condition holds or its deadline passes. While it waits it
// sends the peer a heartbeat every 200 ms, as a dflow process would, so that it is not dropped
// as silent.
class RawPeer {
 public:
  // Connects to "127.0.0.1:PORT"; null (with a test failure) when UCX cannot start.
  static std::unique_ptr<RawPeer> Connect(const std::string& address) {
    auto peer = std::unique_ptr<RawPeer>(new RawPeer);
    if (!peer->Start(address)) return nullptr;
    return peer;
  }

  ~RawPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep_, &param);
      if (UCS_PTR_IS_PTR(r)) {
        Progress(1s, [&] { return ucp_request_check_status(r) != UCS_INPROGRESS; });
        ucp_request_free(r);
      }
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  // Sends one active message of `type` with exactly these bytes; false when UCX failed it or it
  // did not complete within 10 s.
  bool Send(uint16_t type, const std::string& header, const void* payload = nullptr,
            size_t size = 0) {
    auto done = std::make_shared<ucs_status_t>(UCS_INPROGRESS);
    StartSend(type, header, payload, size, done);
    Progress(10s, [&] { return *done != UCS_INPROGRESS; });
    return *done == UCS_OK;
  }

  // The first message of `type` received so far or within `timeout`.
  std::optional<Received> Wait(uint16_t type, std::chrono::milliseconds timeout) {
    std::optional<Received> found;
    Progress(timeout, [&] {
      for (auto it = received_.begin(); it != received_.end(); ++it) {
        if (it->type == type) {
          found = std::move(*it);
          received_.erase(it);
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // The listener's Challenge, the first message on the connection: its nonce (empty, with a
  // test failure, when none came).
  const std::string& ServerNonce() {
    if (server_nonce_.empty()) {
      auto got = Wait(static_cast<uint16_t>(wire::MessageType::kChallenge), 5s);
      EXPECT_TRUE(got.has_value()) << "no Challenge";
      if (!got) return server_nonce_;
      auto challenge = wire::DecodeChallenge(got->header);
      EXPECT_TRUE(challenge.ok()) << challenge.status().ToString();
      if (challenge.ok()) server_nonce_ = challenge->nonce;
    }
    return server_nonce_;
  }
  // The Hello of task /job:master/task:7 answering this connection's Challenge, its proof made
  // with `token`.
  std::string HelloHeader(uint16_t version, const std::string& token) {
    wire::Hello hello{version, "/job:master/task:7", 1, client_nonce_, "", kWorkerTask};
    hello.proof = wire::HandshakeProof(
        token, "hello", {ServerNonce(), client_nonce_, hello.task, "1", kWorkerTask});
    auto header = wire::Encode(hello);
    EXPECT_TRUE(header.ok()) << header.status().ToString();
    return header.ok() ? *header : std::string();
  }
  // Shakes hands as task /job:master/task:7 with `token`; the listener's reply.
  std::optional<wire::HelloReply> Hello(uint16_t version, const std::string& token) {
    const std::string header = HelloHeader(version, token);
    if (header.empty() || !SendHello(header)) return std::nullopt;
    return ReadReply();
  }
  // The proof a SameHost of task 7 carries over this connection.
  std::string SameHostProof(const std::string& token) {
    return wire::HandshakeProof(token, "same host",
                                {ServerNonce(), client_nonce_, "/job:master/task:7", "1"});
  }
  bool SendHello(const std::string& header) {
    return Send(static_cast<uint16_t>(wire::MessageType::kHello), header);
  }
  std::optional<wire::HelloReply> ReadReply() {
    auto got = Wait(static_cast<uint16_t>(wire::MessageType::kHelloReply), 5s);
    if (!got) return std::nullopt;
    auto reply = wire::DecodeHelloReply(got->header);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return std::nullopt;
    return *reply;
  }

  // Sends a request and waits for its response: the status it carries, or the payload.
  Result<std::string> Call(uint16_t method, const void* payload, size_t size) {
    const uint64_t id = ++last_call_;
    auto header = wire::Encode(wire::CallRequest{id, method});
    if (!header.ok()) return header.status();
    if (!Send(static_cast<uint16_t>(wire::MessageType::kCallRequest), *header, payload, size)) {
      return Internal("the request was not sent");
    }
    auto got = Wait(static_cast<uint16_t>(wire::MessageType::kCallResponse), 10s);
    if (!got) return DeadlineExceeded("no response to request {}", id);
    ASSIGN_OR_RETURN(wire::CallResponse response, wire::DecodeCallResponse(got->header));
    if (response.call_id != id) return Internal("the response is to request {}", response.call_id);
    if (!response.status.ok()) return response.status;
    return got->payload;
  }
  Result<std::string> Call(uint16_t method, const std::string& payload) {
    return Call(method, payload.data(), payload.size());
  }

  bool failed() const { return failed_; }

 private:
  RawPeer() = default;

  bool Start(const std::string& address) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    ucs_status_t s = ucp_init(&params, nullptr, &context_);
    EXPECT_EQ(s, UCS_OK) << ucs_status_string(s);
    if (s != UCS_OK) return false;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    EXPECT_EQ(s, UCS_OK) << ucs_status_string(s);
    if (s != UCS_OK) return false;
    for (unsigned id = 1; id <= wire::kMaxMessageType; ++id) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
      hp.id = id;
      hp.cb = &OnMessage;
      hp.arg = new Handler{this, static_cast<uint16_t>(id)};
      handlers_.emplace_back(static_cast<Handler*>(hp.arg));
      hp.flags = UCP_AM_FLAG_WHOLE_MSG;
      EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_, &hp), UCS_OK);
    }
    const size_t colon = address.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    EXPECT_EQ(inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr), 1) << address;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    ep.sockaddr.addrlen = sizeof(addr);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) {
      static_cast<RawPeer*>(arg)->failed_ = true;
    };
    ep.err_handler.arg = this;
    s = ucp_ep_create(worker_, &ep, &ep_);
    EXPECT_EQ(s, UCS_OK) << ucs_status_string(s);
    return s == UCS_OK;
  }

  struct Handler {
    RawPeer* peer;
    uint16_t type;
  };
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
    auto* h = static_cast<Handler*>(arg);
    Received r;
    r.type = h->type;
    r.header.assign(static_cast<const char*>(header), header_length);
    // The worker's replies here are small, so they come eagerly; a rendezvous is dropped.
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && data != nullptr) {
      r.payload.assign(static_cast<const char*>(data), length);
    }
    if (h->type != static_cast<uint16_t>(wire::MessageType::kHeartbeat)) {
      h->peer->received_.push_back(std::move(r));
    }
    return UCS_OK;
  }

  void StartSend(uint16_t type, const std::string& header, const void* payload, size_t size,
                 std::shared_ptr<ucs_status_t> done) {
    // The header must outlive the send: kept with the completion.
    auto* op = new std::pair<std::string, std::shared_ptr<ucs_status_t>>(header, done);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    param.user_data = op;
    param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      auto* op = static_cast<std::pair<std::string, std::shared_ptr<ucs_status_t>>*>(user_data);
      *op->second = status;
      delete op;
      ucp_request_free(request);
    };
    void* r = ucp_am_send_nbx(ep_, type, op->first.data(), op->first.size(), payload, size, &param);
    if (!UCS_PTR_IS_PTR(r)) {
      *done = UCS_PTR_STATUS(r);
      delete op;
    }
  }

  template <typename Cond>
  void Progress(std::chrono::milliseconds timeout, Cond cond) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!cond() && std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_);
      const auto now = std::chrono::steady_clock::now();
      if (ep_ != nullptr && !failed_ && now - last_beat_ > 200ms) {
        last_beat_ = now;
        StartSend(static_cast<uint16_t>(wire::MessageType::kHeartbeat), wire::EncodeHeartbeat(),
                  nullptr, 0, std::make_shared<ucs_status_t>());
      }
    }
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;
  std::vector<std::unique_ptr<Handler>> handlers_;
  std::deque<Received> received_;
  uint64_t last_call_ = 0;
  std::string server_nonce_;  // from the listener's Challenge
  std::string client_nonce_ = std::string(wire::kNonceBytes, '\x42');
  std::chrono::steady_clock::time_point last_beat_ = std::chrono::steady_clock::now();
};

// A dflow-worker whose stderr goes to a file the test reads.
class LoggedWorker {
 public:
  LoggedWorker() {
    log_ = fmt::format("{}/bad_input_worker_{}.log", ::testing::TempDir(), getpid());
    auto token_file = WriteTokenFile(::testing::TempDir(), kBadInputToken);
    EXPECT_TRUE(token_file.ok()) << token_file.status().ToString();
    if (!token_file.ok()) return;
    auto w = LocalWorker::Start(
        DFLOW_WORKER_BINARY, {"--devices", "cpu:0", "--token-file", *token_file, "--threads", "1"},
        "127.0.0.1:0", {"sh", "-c", fmt::format("exec \"$0\" \"$@\" 2>'{}'", log_)});
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (w.ok()) worker_ = std::move(w).value();
  }
  ~LoggedWorker() {
    worker_.reset();
    std::remove(log_.c_str());
  }
  std::string address() const { return worker_ ? worker_->address() : "127.0.0.1:1"; }
  // Its log so far, once it holds `expected` (waits up to 5 s: the worker logs from its thread).
  std::string LogHaving(const std::string& expected) const {
    std::string text;
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(log_);
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      if (text.find(expected) != std::string::npos) break;
      std::this_thread::sleep_for(10ms);
    }
    return text;
  }

 private:
  std::string log_;
  std::unique_ptr<LocalWorker> worker_;
};

// The worker still serves: a master places and runs a graph on it, with the right result.
void ExpectItServes(const LoggedWorker& worker) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{3});
  ops::Mul(root.WithOpName("twice"), a, ops::Const(root, 2.0f));
  DistributedOptions options;
  options.cluster.jobs["worker"].push_back(worker.address());
  options.token = kBadInputToken;
  auto session = DistributedSession::Create(root.graph(), {}, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({{"a", Tensor::FromVector<float>({1, 2, 3}, Shape{3})}}, {"twice"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].ToVector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(WorkerBadInputTest, AnotherProtocolVersionOrTokenIsRefusedWithTheReason) {
  LoggedWorker worker;
  {
    auto peer = RawPeer::Connect(worker.address());
    ASSERT_NE(peer, nullptr);
    auto reply = peer->Hello(wire::kProtocolVersion + 1, kBadInputToken);
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(reply->accepted);
    EXPECT_NE(reply->reason.find(fmt::format("protocol version {}, but this process speaks "
                                             "version {}",
                                             wire::kProtocolVersion + 1, wire::kProtocolVersion)),
              std::string::npos)
        << reply->reason;
    EXPECT_NE(worker.LogHaving("refused").find("refused a connection"), std::string::npos);
  }
  {
    auto peer = RawPeer::Connect(worker.address());
    ASSERT_NE(peer, nullptr);
    auto reply = peer->Hello(wire::kProtocolVersion, "not the token");
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(reply->accepted);
    EXPECT_NE(reply->reason.find("wrong cluster token from task /job:master/task:7"),
              std::string::npos)
        << reply->reason;
  }
  {
    // A Hello recorded on one connection is worth nothing on another (another Challenge), and
    // the token is in none of the listener's messages.
    auto first = RawPeer::Connect(worker.address());
    ASSERT_NE(first, nullptr);
    const std::string recorded = first->HelloHeader(wire::kProtocolVersion, kBadInputToken);
    ASSERT_TRUE(first->SendHello(recorded));
    auto accepted = first->ReadReply();
    ASSERT_TRUE(accepted.has_value());
    EXPECT_TRUE(accepted->accepted) << accepted->reason;
    EXPECT_EQ(recorded.find(kBadInputToken), std::string::npos);
    auto second = RawPeer::Connect(worker.address());
    ASSERT_NE(second, nullptr);
    EXPECT_NE(second->ServerNonce(), first->ServerNonce());
    ASSERT_TRUE(second->SendHello(recorded));
    auto replayed = second->ReadReply();
    ASSERT_TRUE(replayed.has_value());
    EXPECT_FALSE(replayed->accepted);
    EXPECT_NE(replayed->reason.find("wrong cluster token"), std::string::npos) << replayed->reason;
  }
  {
    // Garbage where the Hello should be: refused with what the decoder found.
    auto peer = RawPeer::Connect(worker.address());
    ASSERT_NE(peer, nullptr);
    ASSERT_TRUE(peer->SendHello("\x13\x37 not a hello at all"));
    auto reply = peer->ReadReply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(reply->accepted);
    EXPECT_NE(reply->reason.find("Hello"), std::string::npos) << reply->reason;
  }
  {
    // Requests before the handshake are dropped, not served.
    auto peer = RawPeer::Connect(worker.address());
    ASSERT_NE(peer, nullptr);
    auto header = wire::Encode(wire::CallRequest{1, static_cast<uint16_t>(Method::kGetDevices)});
    ASSERT_TRUE(peer->Send(static_cast<uint16_t>(wire::MessageType::kCallRequest), *header));
    EXPECT_NE(worker.LogHaving("did not shake hands")
                  .find("dropped a request from an endpoint "
                        "that did not shake hands"),
              std::string::npos);
    EXPECT_FALSE(
        peer->Wait(static_cast<uint16_t>(wire::MessageType::kCallResponse), 100ms).has_value());
  }
  ExpectItServes(worker);
}

TEST(WorkerBadInputTest, MalformedMessagesAreDroppedNamingTheReasonAndTheWorkerKeepsServing) {
  LoggedWorker worker;
  auto peer = RawPeer::Connect(worker.address());
  ASSERT_NE(peer, nullptr);
  auto reply = peer->Hello(wire::kProtocolVersion, kBadInputToken);
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->accepted) << reply->reason;
  EXPECT_EQ(reply->task, kWorkerTask);

  wire::TensorHeader tensor;
  tensor.key.src_device = "/job:master/task:7/device:CPU:0";
  tensor.key.src_incarnation = 1;
  tensor.key.dst_device = "/job:worker/task:0/device:CPU:0";
  tensor.key.tensor = "x:0";
  tensor.key.step_id = 12345;
  tensor.send_node = "x/_send";
  tensor.dtype = DType::kF32;
  tensor.shape = Shape{2};
  tensor.bytes = 8;
  const std::string good_tensor = wire::Encode(tensor).value();
  const float values[2] = {1, 2};
  const auto kTensor = static_cast<uint16_t>(wire::MessageType::kTensor);
  const auto kAbort = static_cast<uint16_t>(wire::MessageType::kAbortStep);
  const auto kRequest = static_cast<uint16_t>(wire::MessageType::kCallRequest);
  const auto kResponse = static_cast<uint16_t>(wire::MessageType::kCallResponse);

  // Garbage and truncated headers of every kind that a connected peer may send.
  ASSERT_TRUE(peer->Send(kTensor, "garbage", values, sizeof(values)));
  EXPECT_NE(worker.LogHaving("malformed tensor")
                .find("dropped a malformed tensor message from "
                      "task /job:master/task:7"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(kTensor, good_tensor.substr(0, good_tensor.size() - 3), values, 8));
  ASSERT_TRUE(peer->Send(kAbort, "\x01\x02\x03"));
  EXPECT_NE(worker.LogHaving("malformed abort").find("malformed abort"), std::string::npos);
  ASSERT_TRUE(peer->Send(kRequest, std::string(40, '\xff')));
  EXPECT_NE(worker.LogHaving("malformed request")
                .find("malformed request from task "
                      "/job:master/task:7"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(kResponse, wire::Encode(wire::CallResponse{77, Status::OK()}).value()));
  EXPECT_NE(worker.LogHaving("nobody waits for").find("a response to request 77 nobody waits for"),
            std::string::npos);

  // A second endpoint announced with garbage, the wrong token or a task not connected here.
  const auto kSameHost = static_cast<uint16_t>(wire::MessageType::kSameHost);
  ASSERT_TRUE(peer->Send(kSameHost, "\x01\x02"));
  EXPECT_NE(worker.LogHaving("malformed SameHost").find("dropped a malformed SameHost message"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(kSameHost, wire::Encode(wire::SameHost{"/job:master/task:7", 1,
                                                                peer->SameHostProof("not it")})
                                        .value()));
  EXPECT_NE(worker.LogHaving("with a wrong token")
                .find("SameHost message from task /job:master/task:7 with a wrong token"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(
      kSameHost,
      wire::Encode(wire::SameHost{"/job:master/task:9", 1, peer->SameHostProof(kBadInputToken)})
          .value()));
  EXPECT_NE(worker.LogHaving("no connection here")
                .find("from task /job:master/task:9, which has no connection here"),
            std::string::npos);

  // Tensors by reference: a probe that reads back another value leaves this peer unreadable,
  // so a tensor by reference from it is dropped (the worker never reads memory it has not
  // probed); malformed by-reference messages are dropped naming the reason.
  static uint64_t probe = 0x1234;
  ASSERT_TRUE(peer->Send(
      kSameHost,
      wire::Encode(wire::SameHost{"/job:master/task:7", 1, peer->SameHostProof(kBadInputToken),
                                  static_cast<uint32_t>(getpid()),
                                  reinterpret_cast<uintptr_t>(&probe), 0x4321})
          .value()));
  EXPECT_NE(worker.LogHaving("cannot be read")
                .find("tensors from task /job:master/task:7 come through UCX: its memory cannot "
                      "be read here (the probe read another value)"),
            std::string::npos);
  const auto kTensorRef = static_cast<uint16_t>(wire::MessageType::kTensorRef);
  ASSERT_TRUE(peer->Send(
      kTensorRef,
      wire::Encode(wire::TensorRef{tensor, reinterpret_cast<uintptr_t>(values), 5}).value()));
  EXPECT_NE(worker.LogHaving("not readable here")
                .find("a tensor by reference from task /job:master/task:7, whose memory is not "
                      "readable here"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(kTensorRef, "\x01\x02"));
  EXPECT_NE(worker.LogHaving("malformed tensor by reference")
                .find("malformed tensor by reference from task /job:master/task:7"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(static_cast<uint16_t>(wire::MessageType::kTensorRefDone), good_tensor));
  EXPECT_NE(worker.LogHaving("malformed TensorRefDone")
                .find("malformed TensorRefDone from task /job:master/task:7"),
            std::string::npos);
  ASSERT_TRUE(peer->Send(static_cast<uint16_t>(wire::MessageType::kPeerReads), "garbage"));
  EXPECT_NE(worker.LogHaving("malformed PeerReads")
                .find("malformed PeerReads from task /job:master/task:7"),
            std::string::npos);

  // A tensor header whose size lies: it says 2 floats and 4 MiB come.
  std::vector<char> big(4 << 20);
  ASSERT_TRUE(peer->Send(kTensor, good_tensor, big.data(), big.size()));
  EXPECT_NE(worker.LogHaving("came for").find("4194304 bytes came for"), std::string::npos);
  // A shape whose size overflows.
  wire::TensorHeader huge = tensor;
  huge.shape = Shape{int64_t{1} << 40, int64_t{1} << 40};
  auto huge_header = wire::Encode(huge);
  if (huge_header.ok()) {
    ASSERT_TRUE(peer->Send(kTensor, *huge_header, values, 8));
  }

  // A request declaring more than kMaxCallBytes: answered InvalidArgument before a byte of its
  // payload moves (the memory is reserved, never touched).
  const size_t over = wire::kMaxCallBytes + 1;
  void* reserved =
      mmap(nullptr, over, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED);
  auto too_big = peer->Call(static_cast<uint16_t>(Method::kCompile), reserved, over);
  munmap(reserved, over);
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument) << too_big.status().ToString();
  EXPECT_TRUE(MessageHas(too_big.status(), {"1073741825 bytes", "over the limit"}))
      << too_big.status().ToString();

  // Payloads that are not what each method takes: InvalidArgument naming the request.
  struct BadCall {
    Method method;
    const char* name;
  };
  for (BadCall c :
       {BadCall{Method::kCompile, "Compile request"}, BadCall{Method::kRunStep, "RunStep request"},
        BadCall{Method::kRelease, "Release request"},
        BadCall{Method::kConnectPeers, "ConnectPeers request"},
        BadCall{Method::kReadVariables, "ReadVariables request"},
        BadCall{Method::kWriteVariables, "WriteVariables request"},
        BadCall{Method::kMeasureLinks, "MeasureLinks request"}}) {
    for (const std::string& payload :
         {std::string(), std::string("\x05\x00\x00\x00{\"a\"", 8), std::string(1000, '\x7f')}) {
      auto answer = peer->Call(static_cast<uint16_t>(c.method), payload);
      EXPECT_EQ(answer.status().code(), StatusCode::kInvalidArgument)
          << c.name << ": " << answer.status().ToString();
      EXPECT_TRUE(MessageHas(answer.status(), {c.name})) << answer.status().ToString();
    }
  }
  auto unknown = peer->Call(42, "");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented) << unknown.status().ToString();
  EXPECT_TRUE(MessageHas(unknown.status(), {kWorkerTask, "method 42"}))
      << unknown.status().ToString();

  // A partition with an op nobody registered: refused naming the op and the partition.
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{2});
  ops::Neg(root.WithOpName("negated"), a);
  auto json = serialization::GraphBytesToJson(serialization::EncodeGraph(root.graph()), "graph");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const size_t at = json->find("\"Neg\"");
  ASSERT_NE(at, std::string::npos) << *json;
  std::string unknown_op = *json;
  unknown_op.replace(at, 5, "\"NoSuchOp\"");
  PartitionShare share;
  share.feeds = {{0, "a"}};
  share.fetches = {{0, "negated", 0}};
  CompileRequest compile{"sig-1", 1,    1,
                         true,    true, {{"/job:worker/task:0/device:CPU:0", unknown_op, share}}};
  auto compiled = peer->Call(static_cast<uint16_t>(Method::kCompile), Encode(compile));
  EXPECT_FALSE(compiled.ok());
  EXPECT_TRUE(MessageHas(compiled.status(), {"NoSuchOp", "negated",
                                             "partition 0 of signature "
                                             "sig-1"}))
      << compiled.status().ToString();

  EXPECT_FALSE(peer->failed());
  auto devices = peer->Call(static_cast<uint16_t>(Method::kGetDevices), "");
  EXPECT_TRUE(devices.ok()) << devices.status().ToString();
  peer.reset();
  ExpectItServes(worker);
}

// Issue 31: a token file other users could read was used silently. It is refused as ssh refuses
// such a key, by ReadTokenFile and so by every tool, naming the file and the mode to set.
// A listener (here in this process, with small limits) closes connections that never finish
// the handshake, refuses connections past max_handshaking at once, and frees the state of peers
// that went without finishing it; a real client still gets in afterwards.
TEST(ListenerLimitsTest, SilentConnectionsAreClosedAFloodIsRefusedAndStateIsFreed) {
  std::mutex mu;
  std::vector<std::string> lines;
  transport::UcxTransportOptions o;
  o.task = kWorkerTask;
  o.token = kBadInputToken;
  o.listen_address = "127.0.0.1:0";
  o.connect_timeout = 600ms;
  o.peer_timeout = 300ms;
  o.max_handshaking = 3;
  o.log = [&](std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  };
  auto server = transport::UcxTransport::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string address = (*server)->listen_address();
  std::vector<std::unique_ptr<RawPeer>> silent;
  for (int i = 0; i < 3; ++i) {
    silent.push_back(RawPeer::Connect(address));
    ASSERT_NE(silent.back(), nullptr);
    ASSERT_FALSE(silent.back()->ServerNonce().empty());  // challenged, and silent from now on
  }
  auto flood = RawPeer::Connect(address);
  ASSERT_NE(flood, nullptr);
  EXPECT_FALSE(flood->Wait(static_cast<uint16_t>(wire::MessageType::kChallenge), 1s).has_value());
  EXPECT_TRUE(flood->failed());
  EXPECT_EQ((*server)->stats().connections_refused, 1u);
  // The three silent ones are closed after the 600 ms deadline, and their state freed a peer
  // timeout later.
  uint64_t held = 0;
  for (int i = 0; i < 60; ++i) {
    for (auto& p : silent) (void)p->Wait(0, 10ms);  // keeps their UCX going
    const auto stats = (*server)->stats();
    held = stats.peer_states;
    if (stats.handshakes_timed_out == 3 && held == 0) break;
    std::this_thread::sleep_for(40ms);
  }
  EXPECT_EQ((*server)->stats().handshakes_timed_out, 3u);
  EXPECT_EQ(held, 0u);
  {
    std::lock_guard lock(mu);
    bool closed = false, refused = false;
    for (const auto& l : lines) {
      closed |= l.find("closed the connection from 127.0.0.1:") != std::string::npos &&
                l.find("no handshake within 600 ms") != std::string::npos;
      refused |= l.find("3 connections are still shaking hands") != std::string::npos;
    }
    EXPECT_TRUE(closed && refused);
  }
  // Wrong tokens, one connection after another: each refused, none kept.
  for (int i = 0; i < 10; ++i) {
    auto wrong = RawPeer::Connect(address);
    ASSERT_NE(wrong, nullptr);
    auto reply = wrong->Hello(wire::kProtocolVersion, "not the token");
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(reply->accepted);
  }
  for (int i = 0; i < 50 && (*server)->stats().peer_states > 0; ++i) {
    std::this_thread::sleep_for(40ms);
  }
  EXPECT_EQ((*server)->stats().peer_states, 0u);
  // A real client connects as ever.
  transport::UcxTransportOptions c;
  c.task = "/job:master/task:0";
  c.token = kBadInputToken;
  auto client = transport::UcxTransport::Create(c);
  ASSERT_TRUE(client.ok());
  auto named = (*client)->Connect(address);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(*named, kWorkerTask);
}

TEST(WorkerBadInputTest, ATokenFileOthersCanReadIsRefused) {
  auto path = WriteTokenFile(::testing::TempDir(), kBadInputToken);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  ASSERT_TRUE(ReadTokenFile(*path).ok());
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(path->c_str(), mode), 0);
    auto read = ReadTokenFile(*path);
    EXPECT_EQ(read.status().code(), StatusCode::kPermissionDenied) << mode;
    EXPECT_TRUE(MessageHas(read.status(), {*path, fmt::format("mode {:04o}", mode), "chmod 600"}))
        << read.status().ToString();
  }
  auto ran =
      tools::RunProgram({DFLOW_WORKER_BINARY, "--devices", "cpu:0", "--token-file", *path}, "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 1) << ran->err;
  EXPECT_NE(ran->err.find("PermissionDenied: the token file '" + *path + "'"), std::string::npos)
      << ran->err;
  ::unlink(path->c_str());
}

// Issue 31: dflow-worker on a port in use printed UCX's raw bind error and "Device is busy";
// now one line naming the address and the cause.
TEST(WorkerBadInputTest, APortInUseIsOneLineNamingTheAddress) {
  auto token = WriteTokenFile(::testing::TempDir(), kBadInputToken);
  ASSERT_TRUE(token.ok());
  auto first =
      LocalWorker::Start(DFLOW_WORKER_BINARY, {"--devices", "cpu:0", "--token-file", *token});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string taken = (*first)->address();
  auto ran = tools::RunProgram(
      {DFLOW_WORKER_BINARY, "--listen", taken, "--devices", "cpu:0", "--token-file", *token}, "");
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 1) << ran->err;
  EXPECT_NE(ran->err.find("cannot listen on " + taken + ": the address is in use"),
            std::string::npos)
      << ran->err;
  EXPECT_EQ(std::count(ran->err.begin(), ran->err.end(), '\n'), 1) << ran->err;
  ::unlink(token->c_str());
}

}  // namespace
}  // namespace dflow::distributed
