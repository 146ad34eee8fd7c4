// The messages dflow processes exchange, and their binary form. Every message travels as a UCX
// active message: the message type is the active message id, the fields below are its header,
// and a tensor's bytes are its payload. Headers come from other processes, so decoding treats
// them as untrusted input: every length is bounded, every enum and count is checked, and a
// message that does not decode is InvalidArgument saying which field is wrong (never a crash).
//
// Binary form (all integers little-endian; "str" is a u16 length and that many bytes):
//   every header  u32 magic "DFLW"  u16 protocol version  (then the fields of its type)
//   Challenge     str nonce (from version 6: the server's first message on a connection)
//   Hello         str task  u64 incarnation  str nonce  str proof (before version 6: str token;
//                 such a Hello is refused naming its version)
//                 str assign (the name the listener takes; from version 7 a listener already
//                 named keeps its name and answers with it: the name is the caller's own)
//                 str host  str address (from version 2)
//   HelloReply    u8 accepted  str task  u64 incarnation  str reason
//                 str host  str address (from version 2)  str proof (from version 6)
//   SameHost      str task  u64 incarnation  str proof (before version 6: str token)
//                 u32 pid  u64 probe address  u64 probe value (from version 3)
//                 u32 probe fd  u64 probe inode (from version 4)
//   Tensor        u32 key length + RendezvousKey bytes (framework/rendezvous_key.h)
//                 str send node  u8 dtype  u8 rank  i64 dims[rank]  u64 payload bytes
//   TensorRef     (a Tensor header's fields)  u64 address  u64 reference id  (no payload)
//                 u32 fd  u64 inode  u64 offset  u64 file size (from version 4; inode 0: none)
//   TensorRefDone u16 count (1 to kMaxRefsDone)  u64 reference ids[count]
//   DeviceTensorRef (a Tensor header's fields)  u64 reference id  str handle (no payload)
//   PeerReads     u8 flags (1: reads the memory, 2: maps its memfds; from version 4)
//   AbortStep     i64 step  u8 status code  str message
//   CallRequest   u64 call id  u16 method                       (payload: the request's bytes;
//                 from version 5 a table of serialization/schema/control.fbs, not JSON)
//   CallResponse  u64 call id  u8 status code  str message      (payload: the result's bytes)
//   Heartbeat     (nothing more)
//   Goodbye       (nothing more; from version 6)
//
// The cluster token never travels (from version 6). The server opens a connection with a
// Challenge (a random nonce); the client's Hello carries its own nonce and a proof, HMAC-SHA256
// under the token of both nonces and the Hello's fields (transport/ucx/hmac.h); the server
// checks it, and its HelloReply proves the same of both nonces and the reply's fields; a
// SameHost proves it of the connection's nonces. Without the token no proof can be made, and
// a recorded one is worth nothing on another connection (another server nonce).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/rendezvous_key.h"
#include "graph/allocator.h"
#include "graph/dtype.h"
#include "graph/shape.h"
#include "graph/status.h"
#include "transport/transport_options.h"  // kMaxTokenBytes

namespace dflow::transport {

inline constexpr uint32_t kWireMagic = 0x574c4644;  // "DFLW"
inline constexpr uint16_t kProtocolVersion = 7;
// A handshake nonce's bytes, and the most a nonce or a proof may have on the wire.
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMaxProofBytes = 64;
// No header is larger (UCX over TCP carries headers up to about 8 KiB).
inline constexpr size_t kMaxHeaderBytes = 6144;
inline constexpr size_t kMaxTextBytes = 2048;          // task names, node names, reasons, messages
inline constexpr size_t kMaxAddressBytes = 1024;       // a UCX worker address offered to a peer
inline constexpr size_t kMaxDeviceHandleBytes = 1024;  // Allocator::ExportToPeer's handle

// The active message ids.
enum class MessageType : uint16_t {
  kHello = 1,             // client -> server, first message on a connection
  kHelloReply = 2,        // server -> client: accepted or refused, with the reason
  kTensor = 3,            // a Send's tensor for a Recv in the receiving process
  kAbortStep = 4,         // the step failed in the sending process
  kCallRequest = 5,       // a request to the receiving process's call handler
  kCallResponse = 6,      // its answer
  kHeartbeat = 7,         // "still here": sent to every peer a few times per peer timeout
  kSameHost = 8,          // first message on the second, same-host endpoint to a peer
  kTensorRef = 9,         // a Send's tensor left in the sender's memory for the receiver to copy
  kTensorRefDone = 10,    // receiver -> sender: those tensors are copied (or dropped); free them
  kPeerReads = 11,        // answers SameHost's probe: whether tensors may come by reference
  kDeviceTensorRef = 12,  // a Send's tensor in device memory, by a handle the receiver opens
  kChallenge = 13,        // server -> client, first message on a connection: the server's nonce
  kGoodbye = 14,          // the sender is leaving (its transport shuts down): not a lost peer
};
inline constexpr uint16_t kMaxMessageType = 14;
// The most reference ids one TensorRefDone carries.
inline constexpr size_t kMaxRefsDone = 512;
// The largest payload of a request or response (a partition's graph file travels in one).
inline constexpr uint64_t kMaxCallBytes = uint64_t{1} << 30;

struct Challenge {
  uint16_t version = kProtocolVersion;
  std::string nonce;  // kNonceBytes random bytes
};

struct Hello {
  uint16_t version = kProtocolVersion;  // written by the header, read back on decode
  std::string task;                     // "/job:worker/task:1"
  uint64_t incarnation = 0;
  std::string nonce;  // the client's, kNonceBytes
  // HandshakeProof(token, "hello", {server nonce, nonce, task, incarnation, assign}).
  std::string proof;
  // Non-empty: the task name the listening process takes (a master naming its workers).
  std::string assign;
  // Offered when this process reaches peers of its host through shared memory: what names the
  // host (boot, network and IPC namespaces) and this process's UCX worker address. A peer of
  // the same host answers with its own, and each then opens a second endpoint by the other's
  // worker address (UCX then carries large tensors over shared memory, not TCP; see
  // ucx_transport.cc). Empty: not offered.
  std::string host;
  std::string address;
};

struct HelloReply {
  uint16_t version = kProtocolVersion;
  bool accepted = false;
  std::string task;
  uint64_t incarnation = 0;
  std::string reason;  // why refused
  std::string host;    // offered back (see Hello): only to a peer of the same host
  std::string address;
  // Accepted: HandshakeProof(token, "reply", {server nonce, client nonce, task, incarnation}).
  std::string proof;
};

// Sent first on the second endpoint (by worker address) so the receiver knows whose it is.
// It also lets the receiver try reading the sender's memory (process_vm_readv): 8 bytes at
// `probe_address` of process `pid` should be `probe_value`. When they are, the receiver answers
// PeerReads saying so, and the sender may send it tensors by reference (TensorRef).
struct SameHost {
  std::string task;
  uint64_t incarnation = 0;
  // HandshakeProof(token, "same host", {server nonce, client nonce, task, incarnation}) with
  // the nonces of the first connection between the two.
  std::string proof;
  uint32_t pid = 0;
  uint64_t probe_address = 0;
  uint64_t probe_value = 0;
  // A memfd of the sender holding probe_value at offset 0, for the receiver to map
  // (/proc/PID/fd/FD); inode 0: none offered.
  uint32_t probe_fd = 0;
  uint64_t probe_inode = 0;
};

struct TensorHeader {
  RendezvousKey key;
  std::string send_node;
  DType dtype = DType::kInvalid;
  Shape shape;
  uint64_t bytes = 0;  // the payload: DTypeSize(dtype) * shape.num_elements()
};

// A tensor that stays in the sender's memory at `address` (`tensor.bytes` long) until the
// receiver has copied it out, or stopped reading it where it maps it (`shared`, when the
// tensor lies in a memfd of the sender), and answered TensorRefDone with `id`.
struct TensorRef {
  TensorHeader tensor;
  uint64_t address = 0;
  uint64_t id = 0;
  std::optional<SharedRegion> shared;
};

// A tensor in the sender's device memory, which a receiver of this host reads by `handle`
// (Allocator::ExportToPeer: CUDA IPC); the sender keeps it until TensorRefDone with `id`.
struct DeviceTensorRef {
  TensorHeader tensor;
  uint64_t id = 0;
  std::string handle;  // 1 to kMaxDeviceHandleBytes
};

// What a SameHost's receiver manages with the sender's memory.
struct PeerReads {
  bool reads = false;  // copies out of it (process_vm_readv)
  bool maps = false;   // maps its memfds
};

struct TensorRefDone {
  std::vector<uint64_t> ids;  // 1 to kMaxRefsDone
};

struct AbortStep {
  int64_t step_id = 0;
  Status status;  // not OK
};

struct CallRequest {
  uint64_t call_id = 0;
  uint16_t method = 0;
};

struct CallResponse {
  uint64_t call_id = 0;
  Status status;  // OK: the payload is the result
};

// Encoders fail (InvalidArgument) only when a field is over its limit or the header would be
// larger than kMaxHeaderBytes.
Result<std::string> Encode(const Challenge& m);
Result<std::string> Encode(const Hello& m);
Result<std::string> Encode(const HelloReply& m);
Result<std::string> Encode(const SameHost& m);
Result<std::string> Encode(const TensorHeader& m);
Result<std::string> Encode(const TensorRef& m);
// A TensorRef's header from its tensor's (Encode of a TensorHeader, whose fields it starts
// with): the same bytes, then the address, the id and the shared memory (if any).
Result<std::string> AsTensorRef(std::string tensor_header, uint64_t address, uint64_t id,
                                const std::optional<SharedRegion>& shared);
Result<std::string> Encode(const TensorRefDone& m);
Result<std::string> Encode(const DeviceTensorRef& m);
Result<std::string> Encode(const AbortStep& m);
Result<std::string> Encode(const CallRequest& m);
Result<std::string> Encode(const CallResponse& m);
std::string EncodeHeartbeat();
std::string EncodeGoodbye();
std::string Encode(const PeerReads& m);

// Decoders check the magic, the fields and that nothing trails. Challenge, Hello (from version
// 6) and HelloReply decode any protocol version (so a peer of another version gets a clear
// refusal); the others only kProtocolVersion.
Result<Challenge> DecodeChallenge(std::string_view bytes);
Result<Hello> DecodeHello(std::string_view bytes);
Result<HelloReply> DecodeHelloReply(std::string_view bytes);
Result<SameHost> DecodeSameHost(std::string_view bytes);
Result<TensorHeader> DecodeTensorHeader(std::string_view bytes);
Result<TensorRef> DecodeTensorRef(std::string_view bytes);
Result<TensorRefDone> DecodeTensorRefDone(std::string_view bytes);
Result<DeviceTensorRef> DecodeDeviceTensorRef(std::string_view bytes);
Result<AbortStep> DecodeAbortStep(std::string_view bytes);
Result<CallRequest> DecodeCallRequest(std::string_view bytes);
Result<CallResponse> DecodeCallResponse(std::string_view bytes);
Status DecodeHeartbeat(std::string_view bytes);
Status DecodeGoodbye(std::string_view bytes);
Result<PeerReads> DecodePeerReads(std::string_view bytes);

}  // namespace dflow::transport
