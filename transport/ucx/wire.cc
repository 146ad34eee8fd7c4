#include "transport/ucx/wire.h"

#include <cstring>

namespace dflow::transport {
namespace {

// Tensors above this are refused on decode (a declared size is not trusted to allocate).
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;

class Writer {
 public:
  explicit Writer(uint16_t version = kProtocolVersion) {
    U32(kWireMagic);
    U16(version);
  }
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Raw(v, 2); }
  void U32(uint32_t v) { Raw(v, 4); }
  void U64(uint64_t v) { Raw(v, 8); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  // A u16 length and the bytes; InvalidArgument over `limit`.
  Status Str(std::string_view s, size_t limit, std::string_view what) {
    if (s.size() > limit) {
      return InvalidArgument("{} is {} bytes; at most {} travel in a message", what, s.size(),
                             limit);
    }
    U16(static_cast<uint16_t>(s.size()));
    out_.append(s);
    return Status::OK();
  }
  void Bytes(std::string_view s) { out_.append(s); }
  Result<std::string> Finish(std::string_view message) && {
    if (out_.size() > kMaxHeaderBytes) {
      return InvalidArgument("a {} header of {} bytes is over the limit of {}", message,
                             out_.size(), kMaxHeaderBytes);
    }
    return std::move(out_);
  }

 private:
  void Raw(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view in, std::string_view message) : in_(in), message_(message) {}

  // Checks the magic; the version is returned for the caller to judge.
  Result<uint16_t> Start() {
    if (in_.size() > kMaxHeaderBytes) {
      return InvalidArgument("{} message: header of {} bytes is over the limit of {}", message_,
                             in_.size(), kMaxHeaderBytes);
    }
    ASSIGN_OR_RETURN(uint32_t magic, U32("magic"));
    if (magic != kWireMagic) {
      return InvalidArgument("{} message: not a dflow message (magic {:#x})", message_, magic);
    }
    return U16("protocol version");
  }
  Result<uint8_t> U8(std::string_view field) {
    ASSIGN_OR_RETURN(uint64_t v, Raw(1, field));
    return static_cast<uint8_t>(v);
  }
  Result<uint16_t> U16(std::string_view field) {
    ASSIGN_OR_RETURN(uint64_t v, Raw(2, field));
    return static_cast<uint16_t>(v);
  }
  Result<uint32_t> U32(std::string_view field) {
    ASSIGN_OR_RETURN(uint64_t v, Raw(4, field));
    return static_cast<uint32_t>(v);
  }
  Result<uint64_t> U64(std::string_view field) { return Raw(8, field); }
  Result<int64_t> I64(std::string_view field) {
    ASSIGN_OR_RETURN(uint64_t v, Raw(8, field));
    return static_cast<int64_t>(v);
  }
  Result<std::string> Str(size_t limit, std::string_view field) {
    ASSIGN_OR_RETURN(uint16_t n, U16(field));
    if (n > limit) {
      return InvalidArgument("{} message: {} of {} bytes is over the limit of {}", message_, field,
                             n, limit);
    }
    ASSIGN_OR_RETURN(std::string_view s, Bytes(n, field));
    return std::string(s);
  }
  Result<std::string_view> Bytes(size_t n, std::string_view field) {
    if (in_.size() - pos_ < n) return Truncated(field);
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Status Done() const {
    if (pos_ != in_.size()) {
      return InvalidArgument("{} message: {} bytes trail its last field", message_,
                             in_.size() - pos_);
    }
    return Status::OK();
  }
  Status CheckVersion(uint16_t version) const {
    if (version != kProtocolVersion) {
      return InvalidArgument("{} message: protocol version {}, this process speaks {}", message_,
                             version, kProtocolVersion);
    }
    return Status::OK();
  }

 private:
  Status Truncated(std::string_view field) const {
    return InvalidArgument("{} message: truncated at {} (byte {} of {})", message_, field, pos_,
                           in_.size());
  }
  Result<uint64_t> Raw(int n, std::string_view field) {
    if (in_.size() - pos_ < static_cast<size_t>(n)) return Truncated(field);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= uint64_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
    }
    pos_ += n;
    return v;
  }

  std::string_view in_;
  size_t pos_ = 0;
  std::string_view message_;
};

Status WriteTensorFields(Writer& w, const TensorHeader& m);
Result<TensorHeader> ReadTensorFields(Reader& r, std::string_view message);

}  // namespace

Result<std::string> Encode(const Challenge& m) {
  Writer w(m.version);
  RETURN_IF_ERROR(w.Str(m.nonce, kMaxProofBytes, "the nonce"));
  return std::move(w).Finish("Challenge");
}

Result<std::string> Encode(const Hello& m) {
  Writer w(m.version);
  RETURN_IF_ERROR(w.Str(m.task, kMaxTextBytes, "the task name"));
  w.U64(m.incarnation);
  RETURN_IF_ERROR(w.Str(m.nonce, kMaxProofBytes, "the nonce"));
  RETURN_IF_ERROR(w.Str(m.proof, kMaxProofBytes, "the proof"));
  RETURN_IF_ERROR(w.Str(m.assign, kMaxTextBytes, "the assigned task name"));
  if (m.version >= 2) {
    RETURN_IF_ERROR(w.Str(m.host, kMaxTextBytes, "the host"));
    RETURN_IF_ERROR(w.Str(m.address, kMaxAddressBytes, "the worker address"));
  }
  return std::move(w).Finish("Hello");
}

Result<std::string> Encode(const HelloReply& m) {
  Writer w(m.version);
  w.U8(m.accepted ? 1 : 0);
  RETURN_IF_ERROR(w.Str(m.task, kMaxTextBytes, "the task name"));
  w.U64(m.incarnation);
  RETURN_IF_ERROR(w.Str(m.reason, kMaxTextBytes, "the reason"));
  if (m.version >= 2) {
    RETURN_IF_ERROR(w.Str(m.host, kMaxTextBytes, "the host"));
    RETURN_IF_ERROR(w.Str(m.address, kMaxAddressBytes, "the worker address"));
  }
  if (m.version >= 6) RETURN_IF_ERROR(w.Str(m.proof, kMaxProofBytes, "the proof"));
  return std::move(w).Finish("HelloReply");
}

Result<std::string> Encode(const SameHost& m) {
  Writer w;
  RETURN_IF_ERROR(w.Str(m.task, kMaxTextBytes, "the task name"));
  w.U64(m.incarnation);
  RETURN_IF_ERROR(w.Str(m.proof, kMaxProofBytes, "the proof"));
  w.U32(m.pid);
  w.U64(m.probe_address);
  w.U64(m.probe_value);
  w.U32(m.probe_fd);
  w.U64(m.probe_inode);
  return std::move(w).Finish("SameHost");
}

Result<std::string> Encode(const TensorHeader& m) {
  Writer w;
  RETURN_IF_ERROR(WriteTensorFields(w, m));
  return std::move(w).Finish("Tensor");
}

Result<std::string> Encode(const TensorRef& m) {
  ASSIGN_OR_RETURN(std::string tensor, Encode(m.tensor));
  return AsTensorRef(std::move(tensor), m.address, m.id, m.shared);
}

Result<std::string> AsTensorRef(std::string tensor_header, uint64_t address, uint64_t id,
                                const std::optional<SharedRegion>& shared) {
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      tensor_header.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(address, 8);
  put(id, 8);
  if (shared && (shared->fd < 0 || shared->inode == 0)) {
    return InvalidArgument(
        "a TensorRef's shared memory needs an fd and an inode, not fd {} inode {}", shared->fd,
        shared->inode);
  }
  put(shared ? static_cast<uint32_t>(shared->fd) : 0, 4);
  put(shared ? shared->inode : 0, 8);
  put(shared ? shared->offset : 0, 8);
  put(shared ? shared->file_size : 0, 8);
  if (tensor_header.size() > kMaxHeaderBytes) {
    return InvalidArgument("a TensorRef header of {} bytes is over the limit of {}",
                           tensor_header.size(), kMaxHeaderBytes);
  }
  return tensor_header;
}

Result<std::string> Encode(const DeviceTensorRef& m) {
  if (m.handle.empty()) return InvalidArgument("a DeviceTensorRef needs a handle");
  Writer w;
  RETURN_IF_ERROR(WriteTensorFields(w, m.tensor));
  w.U64(m.id);
  RETURN_IF_ERROR(w.Str(m.handle, kMaxDeviceHandleBytes, "the device handle"));
  return std::move(w).Finish("DeviceTensorRef");
}

Result<std::string> Encode(const TensorRefDone& m) {
  if (m.ids.empty() || m.ids.size() > kMaxRefsDone) {
    return InvalidArgument("a TensorRefDone carries 1 to {} ids, not {}", kMaxRefsDone,
                           m.ids.size());
  }
  Writer w;
  w.U16(static_cast<uint16_t>(m.ids.size()));
  for (uint64_t id : m.ids) w.U64(id);
  return std::move(w).Finish("TensorRefDone");
}

namespace {

Status WriteTensorFields(Writer& w, const TensorHeader& m) {
  std::string key = m.key.Encode();
  w.U32(static_cast<uint32_t>(key.size()));
  w.Bytes(key);
  RETURN_IF_ERROR(w.Str(m.send_node, kMaxTextBytes, "the Send node's name"));
  w.U8(static_cast<uint8_t>(m.dtype));
  if (m.shape.unknown_rank()) return InvalidArgument("a tensor's shape must be known to send it");
  w.U8(static_cast<uint8_t>(m.shape.rank()));
  for (int64_t d : m.shape.dims()) w.I64(d);
  w.U64(m.bytes);
  return Status::OK();
}

}  // namespace

Result<std::string> Encode(const CallRequest& m) {
  Writer w;
  w.U64(m.call_id);
  w.U16(m.method);
  return std::move(w).Finish("CallRequest");
}

Result<std::string> Encode(const CallResponse& m) {
  Writer w;
  w.U64(m.call_id);
  w.U8(static_cast<uint8_t>(m.status.code()));
  std::string_view text = m.status.message();
  RETURN_IF_ERROR(w.Str(text.substr(0, kMaxTextBytes), kMaxTextBytes, "the error message"));
  return std::move(w).Finish("CallResponse");
}

Result<std::string> Encode(const AbortStep& m) {
  Writer w;
  w.I64(m.step_id);
  w.U8(static_cast<uint8_t>(m.status.code()));
  std::string_view text = m.status.message();
  // A long message is cut, not refused: the abort matters more than its last words.
  RETURN_IF_ERROR(w.Str(text.substr(0, kMaxTextBytes), kMaxTextBytes, "the abort message"));
  return std::move(w).Finish("AbortStep");
}

std::string EncodeGoodbye() {
  Writer w;
  return std::move(w).Finish("Goodbye").value();  // nothing that can be over a limit
}

std::string EncodeHeartbeat() {
  Writer w;
  return std::move(w).Finish("Heartbeat").value();  // nothing that can be over a limit
}

std::string Encode(const PeerReads& m) {
  Writer w;
  w.U8((m.reads ? 1 : 0) | (m.maps ? 2 : 0));
  return std::move(w).Finish("PeerReads").value();
}

Result<Challenge> DecodeChallenge(std::string_view bytes) {
  Reader r(bytes, "Challenge");
  Challenge m;
  ASSIGN_OR_RETURN(m.version, r.Start());
  ASSIGN_OR_RETURN(m.nonce, r.Str(kMaxProofBytes, "nonce"));
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<Hello> DecodeHello(std::string_view bytes) {
  Reader r(bytes, "Hello");
  Hello m;
  ASSIGN_OR_RETURN(m.version, r.Start());
  ASSIGN_OR_RETURN(m.task, r.Str(kMaxTextBytes, "task name"));
  ASSIGN_OR_RETURN(m.incarnation, r.U64("incarnation"));
  if (m.version < 6) {
    // Its cluster token in the clear follows: not read, and the peer told why.
    return InvalidArgument(
        "Hello message: protocol version {}, which sends the cluster token; this process speaks "
        "{}",
        m.version, kProtocolVersion);
  }
  ASSIGN_OR_RETURN(m.nonce, r.Str(kMaxProofBytes, "nonce"));
  ASSIGN_OR_RETURN(m.proof, r.Str(kMaxProofBytes, "proof"));
  ASSIGN_OR_RETURN(m.assign, r.Str(kMaxTextBytes, "assigned task"));
  if (m.version >= 2) {
    ASSIGN_OR_RETURN(m.host, r.Str(kMaxTextBytes, "host"));
    ASSIGN_OR_RETURN(m.address, r.Str(kMaxAddressBytes, "worker address"));
  }
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<HelloReply> DecodeHelloReply(std::string_view bytes) {
  Reader r(bytes, "HelloReply");
  HelloReply m;
  ASSIGN_OR_RETURN(m.version, r.Start());
  ASSIGN_OR_RETURN(uint8_t accepted, r.U8("accepted"));
  if (accepted > 1) return InvalidArgument("HelloReply message: accepted flag {}", accepted);
  m.accepted = accepted == 1;
  ASSIGN_OR_RETURN(m.task, r.Str(kMaxTextBytes, "task name"));
  ASSIGN_OR_RETURN(m.incarnation, r.U64("incarnation"));
  ASSIGN_OR_RETURN(m.reason, r.Str(kMaxTextBytes, "reason"));
  if (m.version >= 2) {
    ASSIGN_OR_RETURN(m.host, r.Str(kMaxTextBytes, "host"));
    ASSIGN_OR_RETURN(m.address, r.Str(kMaxAddressBytes, "worker address"));
  }
  if (m.version >= 6) {
    ASSIGN_OR_RETURN(m.proof, r.Str(kMaxProofBytes, "proof"));
  }
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<SameHost> DecodeSameHost(std::string_view bytes) {
  Reader r(bytes, "SameHost");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  SameHost m;
  ASSIGN_OR_RETURN(m.task, r.Str(kMaxTextBytes, "task name"));
  ASSIGN_OR_RETURN(m.incarnation, r.U64("incarnation"));
  ASSIGN_OR_RETURN(m.proof, r.Str(kMaxProofBytes, "proof"));
  ASSIGN_OR_RETURN(m.pid, r.U32("pid"));
  ASSIGN_OR_RETURN(m.probe_address, r.U64("probe address"));
  ASSIGN_OR_RETURN(m.probe_value, r.U64("probe value"));
  ASSIGN_OR_RETURN(m.probe_fd, r.U32("probe fd"));
  ASSIGN_OR_RETURN(m.probe_inode, r.U64("probe inode"));
  if (m.probe_fd > INT32_MAX) return InvalidArgument("SameHost message: probe fd {}", m.probe_fd);
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<TensorHeader> DecodeTensorHeader(std::string_view bytes) {
  Reader r(bytes, "Tensor");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  ASSIGN_OR_RETURN(TensorHeader m, ReadTensorFields(r, "Tensor"));
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<TensorRef> DecodeTensorRef(std::string_view bytes) {
  Reader r(bytes, "TensorRef");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  TensorRef m;
  ASSIGN_OR_RETURN(m.tensor, ReadTensorFields(r, "TensorRef"));
  ASSIGN_OR_RETURN(m.address, r.U64("address"));
  ASSIGN_OR_RETURN(m.id, r.U64("reference id"));
  SharedRegion shared;
  ASSIGN_OR_RETURN(uint32_t fd, r.U32("fd"));
  ASSIGN_OR_RETURN(shared.inode, r.U64("inode"));
  ASSIGN_OR_RETURN(shared.offset, r.U64("offset"));
  ASSIGN_OR_RETURN(shared.file_size, r.U64("file size"));
  RETURN_IF_ERROR(r.Done());
  if (shared.inode == 0) {
    if (fd != 0 || shared.offset != 0 || shared.file_size != 0) {
      return InvalidArgument("TensorRef message: shared memory fields without an inode");
    }
    return m;
  }
  if (fd > INT32_MAX) return InvalidArgument("TensorRef message: fd {}", fd);
  if (shared.offset > shared.file_size || m.tensor.bytes > shared.file_size - shared.offset) {
    return InvalidArgument("TensorRef message: {} bytes at offset {} of a file of {}",
                           m.tensor.bytes, shared.offset, shared.file_size);
  }
  shared.fd = static_cast<int>(fd);
  m.shared = shared;
  return m;
}

Result<DeviceTensorRef> DecodeDeviceTensorRef(std::string_view bytes) {
  Reader r(bytes, "DeviceTensorRef");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  DeviceTensorRef m;
  ASSIGN_OR_RETURN(m.tensor, ReadTensorFields(r, "DeviceTensorRef"));
  ASSIGN_OR_RETURN(m.id, r.U64("reference id"));
  ASSIGN_OR_RETURN(m.handle, r.Str(kMaxDeviceHandleBytes, "device handle"));
  RETURN_IF_ERROR(r.Done());
  if (m.handle.empty()) return InvalidArgument("DeviceTensorRef message: no device handle");
  return m;
}

Result<TensorRefDone> DecodeTensorRefDone(std::string_view bytes) {
  Reader r(bytes, "TensorRefDone");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  ASSIGN_OR_RETURN(uint16_t count, r.U16("count"));
  if (count == 0 || count > kMaxRefsDone) {
    return InvalidArgument("TensorRefDone message: {} ids; 1 to {} may come", count, kMaxRefsDone);
  }
  TensorRefDone m;
  m.ids.resize(count);
  for (uint64_t& id : m.ids) {
    ASSIGN_OR_RETURN(id, r.U64("reference id"));
  }
  RETURN_IF_ERROR(r.Done());
  return m;
}

namespace {

// The fields of a Tensor header (also the start of a TensorRef), named as `message`.
Result<TensorHeader> ReadTensorFields(Reader& r, std::string_view message) {
  TensorHeader m;
  ASSIGN_OR_RETURN(uint32_t key_bytes, r.U32("key length"));
  ASSIGN_OR_RETURN(std::string_view key, r.Bytes(key_bytes, "rendezvous key"));
  auto decoded = RendezvousKey::Decode(key);
  if (!decoded.ok()) {
    return InvalidArgument("{} message: bad rendezvous key: {}", message,
                           decoded.status().message());
  }
  m.key = std::move(decoded).value();
  ASSIGN_OR_RETURN(m.send_node, r.Str(kMaxTextBytes, "Send node"));
  ASSIGN_OR_RETURN(uint8_t dtype, r.U8("dtype"));
  if (dtype == 0 || dtype >= kNumDTypes) {
    return InvalidArgument("{} message: unknown dtype {}", message, dtype);
  }
  m.dtype = static_cast<DType>(dtype);
  ASSIGN_OR_RETURN(uint8_t rank, r.U8("rank"));
  if (rank > Shape::kMaxRank) {
    return InvalidArgument("{} message: rank {} is over the limit of {}", message, rank,
                           Shape::kMaxRank);
  }
  int64_t dims[Shape::kMaxRank];
  uint64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    ASSIGN_OR_RETURN(dims[i], r.I64("dimension"));
    if (dims[i] < 0) return InvalidArgument("{} message: dimension {} is {}", message, i, dims[i]);
    // Bounded product: no overflow below kMaxPayloadBytes.
    if (dims[i] != 0 && elements > kMaxPayloadBytes / static_cast<uint64_t>(dims[i])) {
      return InvalidArgument("{} message: shape over {} elements", message, kMaxPayloadBytes);
    }
    elements *= static_cast<uint64_t>(dims[i]);
  }
  ASSIGN_OR_RETURN(m.shape, Shape::Make({dims, rank}));
  ASSIGN_OR_RETURN(m.bytes, r.U64("payload bytes"));
  if (elements > kMaxPayloadBytes / DTypeSize(m.dtype) ||
      m.bytes != elements * DTypeSize(m.dtype)) {
    return InvalidArgument("{} message: {} payload bytes for a {}{} tensor", message, m.bytes,
                           DTypeName(m.dtype), m.shape);
  }
  return m;
}

}  // namespace

Result<AbortStep> DecodeAbortStep(std::string_view bytes) {
  Reader r(bytes, "AbortStep");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  AbortStep m;
  ASSIGN_OR_RETURN(m.step_id, r.I64("step"));
  ASSIGN_OR_RETURN(uint8_t code, r.U8("status code"));
  if (code == 0 || code > kMaxStatusCode) {
    return InvalidArgument("AbortStep message: status code {} is not an error", code);
  }
  ASSIGN_OR_RETURN(std::string message, r.Str(kMaxTextBytes, "message"));
  m.status = Status(static_cast<StatusCode>(code), std::move(message));
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<CallRequest> DecodeCallRequest(std::string_view bytes) {
  Reader r(bytes, "CallRequest");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  CallRequest m;
  ASSIGN_OR_RETURN(m.call_id, r.U64("call id"));
  ASSIGN_OR_RETURN(m.method, r.U16("method"));
  RETURN_IF_ERROR(r.Done());
  return m;
}

Result<CallResponse> DecodeCallResponse(std::string_view bytes) {
  Reader r(bytes, "CallResponse");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  CallResponse m;
  ASSIGN_OR_RETURN(m.call_id, r.U64("call id"));
  ASSIGN_OR_RETURN(uint8_t code, r.U8("status code"));
  if (code > kMaxStatusCode) {
    return InvalidArgument("CallResponse message: unknown status code {}", code);
  }
  ASSIGN_OR_RETURN(std::string message, r.Str(kMaxTextBytes, "message"));
  if (code == 0 && !message.empty()) {
    return InvalidArgument("CallResponse message: a message with status OK");
  }
  if (code != 0) m.status = Status(static_cast<StatusCode>(code), std::move(message));
  RETURN_IF_ERROR(r.Done());
  return m;
}

Status DecodeHeartbeat(std::string_view bytes) {
  Reader r(bytes, "Heartbeat");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  return r.Done();
}

Status DecodeGoodbye(std::string_view bytes) {
  Reader r(bytes, "Goodbye");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  return r.Done();
}

Result<PeerReads> DecodePeerReads(std::string_view bytes) {
  Reader r(bytes, "PeerReads");
  ASSIGN_OR_RETURN(uint16_t version, r.Start());
  RETURN_IF_ERROR(r.CheckVersion(version));
  ASSIGN_OR_RETURN(uint8_t flags, r.U8("flags"));
  if (flags > 3) return InvalidArgument("PeerReads message: flags {}", flags);
  RETURN_IF_ERROR(r.Done());
  return PeerReads{(flags & 1) != 0, (flags & 2) != 0};
}

}  // namespace dflow::transport
