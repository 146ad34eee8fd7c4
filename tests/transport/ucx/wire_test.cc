#include "transport/ucx/wire.h"

#include <gtest/gtest.h>

#include <random>

#include "status_matchers.h"
#include "transport/ucx/hmac.h"

namespace dflow::transport {
namespace {

using testing::MessageHas;

TensorHeader SampleTensor() {
  TensorHeader h;
  h.key.src_device = "/job:worker/task:0/device:CPU:0";
  h.key.src_incarnation = 77;
  h.key.dst_device = "/job:worker/task:1/device:CPU:0";
  h.key.tensor = "dense/MatMul:0";
  h.key.step_id = 12;
  h.send_node = "dense/MatMul/_send_1";
  h.dtype = DType::kF32;
  h.shape = Shape{128, 2048};
  h.bytes = 128 * 2048 * 4;
  return h;
}

TEST(WireTest, HeartbeatsCarryNothingButTheirHeader) {
  std::string beat = EncodeHeartbeat();
  EXPECT_TRUE(DecodeHeartbeat(beat).ok());
  EXPECT_FALSE(DecodeHeartbeat(beat + "x").ok());  // nothing may trail
  EXPECT_FALSE(DecodeHeartbeat(beat.substr(0, beat.size() - 1)).ok());
  EXPECT_FALSE(DecodeHeartbeat("").ok());
}

TEST(WireTest, EveryMessageRoundTrips) {
  const std::string nonce(kNonceBytes, '\x5a'), proof(kSha256Bytes, '\x07');
  auto c = DecodeChallenge(Encode(Challenge{kProtocolVersion, nonce}).value());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nonce, nonce);
  EXPECT_EQ(c->version, kProtocolVersion);

  Hello hello{kProtocolVersion, "/job:worker/task:1", 99, nonce, proof};
  auto h = DecodeHello(Encode(hello).value());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->task, hello.task);
  EXPECT_EQ(h->incarnation, 99u);
  EXPECT_EQ(h->nonce, nonce);
  EXPECT_EQ(h->proof, proof);
  EXPECT_EQ(h->version, kProtocolVersion);
  // The token is in no message; a Hello of a version that sent it is refused naming versions.
  Hello version5{5, "/job:worker/task:1", 99};
  auto o5 = DecodeHello(Encode(version5).value());
  EXPECT_TRUE(MessageHas(o5.status(), {"protocol version 5", "speaks 7"}))
      << o5.status().ToString();

  HelloReply reply{kProtocolVersion, false, "/job:worker/task:0", 5, "wrong cluster token"};
  auto r = DecodeHelloReply(Encode(reply).value());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->accepted);
  EXPECT_EQ(r->task, reply.task);
  EXPECT_EQ(r->incarnation, 5u);
  EXPECT_EQ(r->reason, reply.reason);

  TensorHeader t = SampleTensor();
  auto d = DecodeTensorHeader(Encode(t).value());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->key, t.key);
  EXPECT_EQ(d->send_node, t.send_node);
  EXPECT_EQ(d->dtype, DType::kF32);
  EXPECT_EQ(d->shape, t.shape);
  EXPECT_EQ(d->bytes, t.bytes);

  // A scalar and an empty tensor.
  t.shape = Shape{};
  t.bytes = 4;
  EXPECT_TRUE(DecodeTensorHeader(Encode(t).value()).ok());
  t.shape = Shape{0, 5};
  t.bytes = 0;
  EXPECT_TRUE(DecodeTensorHeader(Encode(t).value()).ok());

  Hello named{kProtocolVersion, "/job:master/task:0", 1, nonce, proof, "/job:worker/task:2"};
  EXPECT_EQ(DecodeHello(Encode(named).value())->assign, "/job:worker/task:2");

  // The same-host offer, its answer and the message on the second endpoint.
  const std::string address("\x00\x01\xffworker", 9);
  Hello offer{kProtocolVersion, "/job:master/task:0", 1, nonce, proof, "", "boot net ipc pid",
              address};
  auto o = DecodeHello(Encode(offer).value());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->host, "boot net ipc pid");
  EXPECT_EQ(o->address, address);
  HelloReply back{kProtocolVersion, true, "/job:worker/task:0", 5, "", "boot net ipc pid",
                  address,          proof};
  auto b = DecodeHelloReply(Encode(back).value());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->address, address);
  EXPECT_EQ(b->proof, proof);
  offer.address = std::string(kMaxAddressBytes + 1, 'a');
  EXPECT_EQ(Encode(offer).status().code(), StatusCode::kInvalidArgument);
  auto same = DecodeSameHost(
      Encode(SameHost{"/job:worker/task:3", 7, proof, 4321, 0x7ffd12345678, ~uint64_t{5}, 17, 88})
          .value());
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->task, "/job:worker/task:3");
  EXPECT_EQ(same->incarnation, 7u);
  EXPECT_EQ(same->proof, proof);
  EXPECT_EQ(same->pid, 4321u);
  EXPECT_EQ(same->probe_address, 0x7ffd12345678u);
  EXPECT_EQ(same->probe_value, ~uint64_t{5});
  EXPECT_EQ(same->probe_fd, 17u);
  EXPECT_EQ(same->probe_inode, 88u);

  // Tensors by reference: the tensor's fields, its address and id; the answer's ids.
  TensorRef ref{SampleTensor(), 0x7f0012340000, 99};
  auto by_ref = DecodeTensorRef(Encode(ref).value());
  ASSERT_TRUE(by_ref.ok()) << by_ref.status().ToString();
  EXPECT_EQ(by_ref->tensor.key.ToString(), ref.tensor.key.ToString());
  EXPECT_EQ(by_ref->tensor.send_node, ref.tensor.send_node);
  EXPECT_EQ(by_ref->tensor.shape, ref.tensor.shape);
  EXPECT_EQ(by_ref->tensor.bytes, ref.tensor.bytes);
  EXPECT_EQ(by_ref->address, 0x7f0012340000u);
  EXPECT_EQ(by_ref->id, 99u);
  EXPECT_FALSE(by_ref->shared.has_value());
  // In a memfd of the sender: where in which file.
  ref.shared = SharedRegion{12, 4242, 4096, 4 << 20};
  auto mapped = DecodeTensorRef(Encode(ref).value());
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  ASSERT_TRUE(mapped->shared.has_value());
  EXPECT_EQ(mapped->shared->fd, 12);
  EXPECT_EQ(mapped->shared->inode, 4242u);
  EXPECT_EQ(mapped->shared->offset, 4096u);
  EXPECT_EQ(mapped->shared->file_size, uint64_t{4} << 20);
  // A region the tensor does not fit in, or fields without an inode, are refused.
  ref.shared->offset = (4 << 20) - ref.tensor.bytes + 1;
  EXPECT_TRUE(MessageHas(DecodeTensorRef(Encode(ref).value()).status(),
                         {"TensorRef message", "of a file of 4194304"}));
  ref.shared = SharedRegion{12, 4242, 0, 4 << 20};
  std::string no_inode = Encode(ref).value();
  for (int i = 0; i < 8; ++i) no_inode[no_inode.size() - 24 + i] = 0;  // the inode
  EXPECT_TRUE(MessageHas(DecodeTensorRef(no_inode).status(), {"without an inode"}));
  ref.shared = SharedRegion{-1, 4242, 0, 4 << 20};
  EXPECT_EQ(Encode(ref).status().code(), StatusCode::kInvalidArgument);
  ref.shared.reset();
  // A Tensor header is not a TensorRef, nor the other way round.
  EXPECT_TRUE(MessageHas(DecodeTensorRef(Encode(SampleTensor()).value()).status(),
                         {"TensorRef message", "truncated"}));
  EXPECT_TRUE(MessageHas(DecodeTensorHeader(Encode(ref).value()).status(), {"trail"}));
  std::vector<uint64_t> ids(kMaxRefsDone);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 3 + 1;
  auto done = DecodeTensorRefDone(Encode(TensorRefDone{ids}).value());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->ids, ids);
  EXPECT_EQ(Encode(TensorRefDone{}).status().code(), StatusCode::kInvalidArgument);
  ids.push_back(1);
  EXPECT_TRUE(MessageHas(Encode(TensorRefDone{ids}).status(), {"1 to 512 ids"}));
  for (int flags = 0; flags < 4; ++flags) {
    auto p = DecodePeerReads(Encode(PeerReads{(flags & 1) != 0, (flags & 2) != 0}));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->reads, (flags & 1) != 0);
    EXPECT_EQ(p->maps, (flags & 2) != 0);
  }
  std::string bad_flag = Encode(PeerReads{true, true});
  bad_flag.back() = 4;
  EXPECT_TRUE(MessageHas(DecodePeerReads(bad_flag).status(), {"PeerReads message", "flags 4"}));

  // A version 1 Hello (no offer, a token) is refused naming its version.
  Hello old{1, "/job:master/task:0", 1, "t", "", "", "ignored", "ignored"};
  auto v1 = DecodeHello(Encode(old).value());
  EXPECT_TRUE(MessageHas(v1.status(), {"protocol version 1", "speaks 7"}))
      << v1.status().ToString();

  auto req = DecodeCallRequest(Encode(CallRequest{1234567890123, 9}).value());
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_EQ(req->call_id, 1234567890123u);
  EXPECT_EQ(req->method, 9);
  auto ok = DecodeCallResponse(Encode(CallResponse{5, Status::OK()}).value());
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->status.ok());
  auto err = DecodeCallResponse(Encode(CallResponse{6, NotFound("no variable 'w'")}).value());
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->call_id, 6u);
  EXPECT_EQ(err->status, NotFound("no variable 'w'"));

  AbortStep abort{7, Internal("node 'boom' failed")};
  auto a = DecodeAbortStep(Encode(abort).value());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->step_id, 7);
  EXPECT_EQ(a->status, Internal("node 'boom' failed"));
}

// A tensor in device memory: its fields, its id and the handle the receiver opens; a
// truncated one, an empty handle or one over the limit is refused naming the message.
TEST(WireTest, DeviceTensorRefsRoundTripAndBadOnesAreRefused) {
  DeviceTensorRef ref{SampleTensor(), 41, std::string(156, '\x07')};
  std::string bytes = Encode(ref).value();
  auto back = DecodeDeviceTensorRef(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tensor.key.ToString(), ref.tensor.key.ToString());
  EXPECT_EQ(back->tensor.shape, ref.tensor.shape);
  EXPECT_EQ(back->tensor.bytes, ref.tensor.bytes);
  EXPECT_EQ(back->id, 41u);
  EXPECT_EQ(back->handle, ref.handle);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeDeviceTensorRef(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_TRUE(MessageHas(d.status(), {"DeviceTensorRef message"})) << d.status().ToString();
  }
  EXPECT_FALSE(DecodeDeviceTensorRef(Encode(SampleTensor()).value()).ok());
  ref.handle.clear();
  EXPECT_EQ(Encode(ref).status().code(), StatusCode::kInvalidArgument);
  std::string empty = bytes.substr(0, bytes.size() - 158) + std::string(2, '\0');
  EXPECT_TRUE(MessageHas(DecodeDeviceTensorRef(empty).status(), {"no device handle"}));
  ref.handle.assign(kMaxDeviceHandleBytes + 1, 'h');
  EXPECT_TRUE(MessageHas(Encode(ref).status(), {"device handle", "at most 1024"}));
}

TEST(WireTest, EveryTruncationIsRefusedNamingTheField) {
  std::string full = Encode(SampleTensor()).value();
  for (size_t n = 0; n < full.size(); ++n) {
    auto d = DecodeTensorHeader(std::string_view(full).substr(0, n));
    ASSERT_FALSE(d.ok()) << "prefix of " << n << " bytes";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(d.status(), {"Tensor message"})) << d.status().ToString();
  }
  std::string hello = Encode(Hello{kProtocolVersion, "/job:w/task:0", 1, "t"}).value();
  for (size_t n = 0; n < hello.size(); ++n) {
    EXPECT_FALSE(DecodeHello(std::string_view(hello).substr(0, n)).ok());
  }
  auto trailing = DecodeTensorHeader(full + "x");
  EXPECT_TRUE(MessageHas(trailing.status(), {"1 bytes trail"})) << trailing.status().ToString();
}

TEST(WireTest, BadFieldsAreRefusedWithTheReason) {
  std::string good = Encode(SampleTensor()).value();
  auto refuse = [](std::string bytes, std::vector<std::string> words) {
    auto d = DecodeTensorHeader(bytes);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(d.status(), words)) << d.status().ToString();
  };
  std::string bad = good;
  bad[0] = 'X';
  refuse(bad, {"not a dflow message"});
  bad = good;
  bad[4] = 9;  // protocol version 9
  refuse(bad, {"protocol version 9"});

  // Fields after the key: find them from the end (u64 payload, 2 dims, rank, dtype).
  size_t dims_at = good.size() - 8 - 16;
  size_t rank_at = dims_at - 1;
  size_t dtype_at = rank_at - 1;
  bad = good;
  bad[dtype_at] = 0;
  refuse(bad, {"unknown dtype 0"});
  bad = good;
  bad[dtype_at] = static_cast<char>(kNumDTypes);
  refuse(bad, {"unknown dtype"});
  bad = good;
  bad[rank_at] = 9;
  refuse(bad, {"rank 9"});
  bad = good;
  bad[dims_at + 7] = static_cast<char>(0x80);  // first dim negative
  refuse(bad, {"dimension 0"});
  bad = good;
  bad[dims_at + 6] = 0x7f;  // a huge first dim: the product is bounded
  refuse(bad, {"elements"});
  bad = good;
  bad[good.size() - 8] ^= 1;  // payload bytes off by one
  refuse(bad, {"payload bytes", "f32[128,2048]"});

  // A string length beyond the message.
  std::string hello = Encode(Hello{kProtocolVersion, "/job:w/task:0", 1, "t"}).value();
  hello[6] = static_cast<char>(0xff);
  hello[7] = static_cast<char>(0x07);
  auto h = DecodeHello(hello);
  EXPECT_TRUE(MessageHas(h.status(), {"task name"})) << h.status().ToString();

  std::string abort = Encode(AbortStep{1, Internal("x")}).value();
  abort[6 + 8] = 0;  // status code OK
  EXPECT_TRUE(MessageHas(DecodeAbortStep(abort).status(), {"not an error"}));
  abort[6 + 8] = static_cast<char>(kMaxStatusCode + 1);
  EXPECT_FALSE(DecodeAbortStep(abort).ok());
}

TEST(WireTest, OversizedFieldsAreRefusedOnBothSides) {
  Hello hello{kProtocolVersion, "/job:w/task:0", 1, std::string(kMaxProofBytes + 1, 'k')};
  auto e = Encode(hello);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(e.status(), {"nonce", "65"})) << e.status().ToString();
  TensorHeader t = SampleTensor();
  t.key.tensor = std::string(4000, 'n');
  t.key.dst_device = std::string(3000, 'd');
  EXPECT_TRUE(MessageHas(Encode(t).status(), {"over the limit"}));
  std::string huge(kMaxHeaderBytes + 1, 'x');
  EXPECT_TRUE(MessageHas(DecodeTensorHeader(huge).status(), {"over the limit"}));
  // An abort's long message is cut, not refused.
  auto a = DecodeAbortStep(Encode(AbortStep{3, Internal("{}", std::string(5000, 'm'))}).value());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status.message().size(), kMaxTextBytes);
}

// Random bytes and random mutations of valid messages: every decoder returns (never crashes or
// over-reads; the ASan build checks the latter).
TEST(WireTest, GarbageNeverCrashesADecoder) {
  std::mt19937 gen(7);
  std::vector<std::string> valid = {
      Encode(SampleTensor()).value(),
      Encode(Hello{kProtocolVersion, "/job:w/task:0", 1, "n", "p"}).value(),
      Encode(Challenge{kProtocolVersion, std::string(kNonceBytes, 'c')}).value(),
      Encode(HelloReply{kProtocolVersion, true, "/job:w/task:1", 2, ""}).value(),
      Encode(AbortStep{4, Unavailable("gone")}).value(),
      Encode(CallRequest{3, 2}).value(),
      Encode(CallResponse{3, Internal("x")}).value(),
      Encode(TensorRef{SampleTensor(), 64, 2}).value(),
      Encode(TensorRef{SampleTensor(), 64, 2, SharedRegion{5, 6, 0, 4 << 20}}).value(),
      Encode(TensorRefDone{{1, 2, 3}}).value(),
      Encode(PeerReads{true, true})};
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(gen() % 96);
      for (char& c : bytes) c = static_cast<char>(gen());
    } else {
      bytes = valid[gen() % valid.size()];
      int flips = 1 + gen() % 4;
      for (int f = 0; f < flips; ++f) bytes[gen() % bytes.size()] = static_cast<char>(gen());
    }
    decoded += DecodeTensorHeader(bytes).ok() + DecodeHello(bytes).ok() +
               DecodeHelloReply(bytes).ok() + DecodeAbortStep(bytes).ok() +
               DecodeCallRequest(bytes).ok() + DecodeCallResponse(bytes).ok() +
               DecodeTensorRef(bytes).ok() + DecodeTensorRefDone(bytes).ok() +
               DecodePeerReads(bytes).ok() + DecodeDeviceTensorRef(bytes).ok() +
               DecodeChallenge(bytes).ok();
  }
  // Some mutations leave a valid message (a changed name byte); most do not.
  EXPECT_LT(decoded, 40000);
}

}  // namespace
}  // namespace dflow::transport
