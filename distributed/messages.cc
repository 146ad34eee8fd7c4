#include "distributed/messages.h"

#include <fmt/format.h>

#include "serialization/schema/control_generated.h"
#include "serialization/tensor_codec.h"

namespace dflow::distributed {
namespace {

namespace sz = serialization;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// The most entries any list of a message may hold (a signature's partitions, a step's feeds, a
// trace's nodes): beyond the sizes dflow makes, far below what exhausts memory.
constexpr uint32_t kMaxEntries = 1u << 22;
// An address or a launcher's name in a Register request, and the devices one worker may list.
constexpr size_t kMaxNameBytes = 1024;
constexpr size_t kMaxWorkerDevices = 4096;

// A message is size-prefixed, so a truncated one, or one with bytes after it, is refused.
template <typename T>
std::string Finish(FlatBufferBuilder& b, Offset<T> root) {
  b.FinishSizePrefixed(root);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

// The verified root table of a message, or InvalidArgument naming it. FlatBuffers reads 8-byte
// scalars in place, so bytes that are not 8-aligned are copied into `storage` first (which must
// outlive the table).
template <typename Table>
Result<const Table*> Root(std::string_view bytes, std::string& storage, std::string_view what) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    storage.assign(bytes);
    bytes = storage;
  }
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < sizeof(flatbuffers::uoffset_t)) {
    return InvalidArgument("{}: {} bytes are too few for a message", what, bytes.size());
  }
  flatbuffers::Verifier verifier(data, bytes.size(), 64,
                                 static_cast<flatbuffers::uoffset_t>(bytes.size() / 4 + 16));
  if (!verifier.VerifySizePrefixedBuffer<Table>(nullptr)) {
    return InvalidArgument(
        "{}: not a valid message of {} bytes (FlatBuffers verification failed: truncated, "
        "trailing bytes or another message)",
        what, bytes.size());
  }
  return flatbuffers::GetSizePrefixedRoot<Table>(data);
}

// A list's size, checked against kMaxEntries (null: empty).
template <typename V>
Result<uint32_t> Count(const V* list, std::string_view what, const char* field) {
  if (list == nullptr) return 0u;
  if (list->size() > kMaxEntries) {
    return InvalidArgument("{}: field '{}' has {} entries, over the limit of {}", what, field,
                           list->size(), kMaxEntries);
  }
  return list->size();
}

std::string Str(const flatbuffers::String* s) { return s == nullptr ? "" : s->str(); }

Offset<fb::Tensor> PutTensor(FlatBufferBuilder& b, const Tensor& t) {
  return sz::EncodeTensor(b, t);
}

Offset<flatbuffers::Vector<Offset<fb::IndexedTensor>>> PutIndexed(FlatBufferBuilder& b,
                                                                  const IndexedTensors& tensors) {
  std::vector<Offset<fb::IndexedTensor>> out;
  for (const auto& [index, value] : tensors) {
    out.push_back(fb::CreateIndexedTensor(b, index, PutTensor(b, value)));
  }
  return b.CreateVector(out);
}

Result<IndexedTensors> GetIndexed(const flatbuffers::Vector<Offset<fb::IndexedTensor>>* list,
                                  std::string_view what, const char* field) {
  ASSIGN_OR_RETURN(uint32_t n, Count(list, what, field));
  IndexedTensors out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const fb::IndexedTensor* t = list->Get(i);
    if (t->index() < 0) {
      return InvalidArgument("{}: field '{}': index {} is negative", what, field, t->index());
    }
    ASSIGN_OR_RETURN(Tensor value, sz::DecodeTensor(t->value(), [&] {
                       return fmt::format("{}: field '{}', entry {}", what, field, i);
                     }));
    out.emplace_back(t->index(), std::move(value));
  }
  return out;
}

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> PutStrings(
    FlatBufferBuilder& b, const std::vector<std::string>& strings) {
  return b.CreateVectorOfStrings(strings);
}

Result<std::vector<std::string>> GetStrings(
    const flatbuffers::Vector<Offset<flatbuffers::String>>* list, std::string_view what,
    const char* field) {
  ASSIGN_OR_RETURN(uint32_t n, Count(list, what, field));
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(Str(list->Get(i)));
  return out;
}

}  // namespace

uint64_t MaxReplyBytes(Method method) {
  constexpr uint64_t kEmpty = 4 << 10;  // an acknowledgement, with room to spare
  switch (method) {
    case Method::kGetDevices:
    case Method::kMeasureLinks:
      return uint64_t{4} << 20;  // thousands of devices or links
    case Method::kCompile:
    case Method::kRelease:
    case Method::kConnectPeers:
    case Method::kWriteVariables:
    case Method::kEcho:
      return kEmpty;
    case Method::kRegister:
      return 64 << 10;
    case Method::kRunStep:
    case Method::kReadVariables:
      break;
  }
  return uint64_t{1} << 30;  // the transport's own limit
}

std::string Encode(const GetDevicesRequest& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateGetDevicesRequest(b, m.job.empty() ? 0 : b.CreateString(m.job)));
}

Result<GetDevicesRequest> DecodeGetDevicesRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "GetDevices request";
  if (bytes.empty()) return GetDevicesRequest{};
  std::string storage;
  ASSIGN_OR_RETURN(const fb::GetDevicesRequest* r,
                   Root<fb::GetDevicesRequest>(bytes, storage, kWhat));
  GetDevicesRequest out{Str(r->job())};
  RETURN_IF_ERROR(CheckJobName(out.job).WithPrefix(fmt::format("{}: field 'job': ", kWhat)));
  return out;
}

Status CheckJobName(std::string_view job) {
  if (job.size() > kMaxJobNameBytes) {
    return InvalidArgument(
        "job '{}' has {} bytes, over the limit of {} (a job is printable ASCII, no spaces)", job,
        job.size(), kMaxJobNameBytes);
  }
  for (char c : job) {
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgument("job '{}' holds a byte {:#04x}; a job is printable ASCII, no spaces",
                             job, static_cast<unsigned char>(c));
    }
  }
  return Status::OK();
}

std::string Encode(const GetDevicesReply& m) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::DeviceInfo>> devices;
  for (const DeviceInfo& d : m.devices) {
    devices.push_back(fb::CreateDeviceInfo(b, b.CreateString(d.name), d.incarnation, d.memory_bytes,
                                           d.peak_flops, d.memory_bandwidth, d.launch_overhead_s));
  }
  return Finish(b, fb::CreateGetDevicesReply(b, b.CreateVector(devices), m.same_process_latency_s,
                                             m.same_process_bandwidth));
}

Result<GetDevicesReply> DecodeGetDevicesReply(std::string_view bytes) {
  constexpr std::string_view kWhat = "GetDevices reply";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::GetDevicesReply* r, Root<fb::GetDevicesReply>(bytes, storage, kWhat));
  ASSIGN_OR_RETURN(uint32_t n, Count(r->devices(), kWhat, "devices"));
  if (n == 0) return InvalidArgument("{}: it lists no devices", kWhat);
  GetDevicesReply out;
  for (uint32_t i = 0; i < n; ++i) {
    const fb::DeviceInfo* d = r->devices()->Get(i);
    out.devices.push_back({d->name()->str(), d->incarnation(), d->memory_bytes(), d->peak_flops(),
                           d->memory_bandwidth(), d->launch_overhead_s()});
  }
  out.same_process_latency_s = r->same_process_latency_s();
  out.same_process_bandwidth = r->same_process_bandwidth();
  return out;
}

std::string Encode(const CompileRequest& m) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::PartitionToCompile>> parts;
  for (const auto& p : m.partitions) {
    std::vector<Offset<fb::ShareFeed>> feeds;
    for (const auto& f : p.share.feeds) {
      feeds.push_back(fb::CreateShareFeed(b, f.index, b.CreateString(f.node)));
    }
    std::vector<Offset<fb::ShareFetch>> fetches;
    for (const auto& f : p.share.fetches) {
      fetches.push_back(fb::CreateShareFetch(b, f.index, b.CreateString(f.node), f.output));
    }
    auto graph = b.CreateVector(reinterpret_cast<const uint8_t*>(p.graph.data()), p.graph.size());
    parts.push_back(fb::CreatePartitionToCompile(b, b.CreateString(p.device), graph,
                                                 b.CreateVector(feeds), b.CreateVector(fetches),
                                                 PutStrings(b, p.share.targets)));
  }
  return Finish(b,
                fb::CreateCompileRequest(b, b.CreateString(m.signature), m.num_feeds, m.num_fetches,
                                         m.plan_memory, m.fuse_epilogues, b.CreateVector(parts)));
}

Result<CompileRequest> DecodeCompileRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "Compile request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::CompileRequest* r, Root<fb::CompileRequest>(bytes, storage, kWhat));
  CompileRequest out;
  out.signature = r->signature()->str();
  out.num_feeds = r->num_feeds();
  out.num_fetches = r->num_fetches();
  if (out.num_feeds < 0 || out.num_fetches < 0 || out.num_feeds > static_cast<int>(kMaxEntries) ||
      out.num_fetches > static_cast<int>(kMaxEntries)) {
    return InvalidArgument("{}: a step of {} feeds and {} fetches", kWhat, out.num_feeds,
                           out.num_fetches);
  }
  out.plan_memory = r->plan_memory();
  out.fuse_epilogues = r->fuse_epilogues();
  ASSIGN_OR_RETURN(uint32_t n, Count(r->partitions(), kWhat, "partitions"));
  if (n == 0) return InvalidArgument("{}: it holds no partition", kWhat);
  for (uint32_t i = 0; i < n; ++i) {
    const fb::PartitionToCompile* p = r->partitions()->Get(i);
    CompileRequest::Partition& part = out.partitions.emplace_back();
    part.device = p->device()->str();
    part.graph.assign(reinterpret_cast<const char*>(p->graph()->data()), p->graph()->size());
    ASSIGN_OR_RETURN(uint32_t feeds, Count(p->feeds(), kWhat, "feeds"));
    for (uint32_t k = 0; k < feeds; ++k) {
      part.share.feeds.push_back({p->feeds()->Get(k)->index(), p->feeds()->Get(k)->node()->str()});
    }
    ASSIGN_OR_RETURN(uint32_t fetches, Count(p->fetches(), kWhat, "fetches"));
    for (uint32_t k = 0; k < fetches; ++k) {
      const fb::ShareFetch* f = p->fetches()->Get(k);
      part.share.fetches.push_back({f->index(), f->node()->str(), f->output()});
    }
    ASSIGN_OR_RETURN(part.share.targets, GetStrings(p->targets(), kWhat, "targets"));
  }
  return out;
}

std::string Encode(const RunStepRequest& m) {
  FlatBufferBuilder b;
  auto feeds = PutIndexed(b, m.feeds);
  return Finish(b, fb::CreateRunStepRequest(b, b.CreateString(m.signature), m.step, m.timeout_ms,
                                            m.trace, feeds));
}

Result<RunStepRequest> DecodeRunStepRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "RunStep request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::RunStepRequest* r, Root<fb::RunStepRequest>(bytes, storage, kWhat));
  RunStepRequest out;
  out.signature = r->signature()->str();
  out.step = r->step();
  out.timeout_ms = r->timeout_ms();
  if (out.timeout_ms < 0) return InvalidArgument("{}: timeout of {} ms", kWhat, out.timeout_ms);
  out.trace = r->trace();
  ASSIGN_OR_RETURN(out.feeds, GetIndexed(r->feeds(), kWhat, "feeds"));
  return out;
}

std::string Encode(const RunStepReply& m) {
  FlatBufferBuilder b;
  auto fetches = PutIndexed(b, m.fetches);
  std::vector<Offset<fb::DeviceTrace>> devices;
  for (const DeviceTrace& d : m.devices) {
    std::vector<Offset<fb::TracedNode>> nodes;
    for (const TracedNode& n : d.nodes) {
      nodes.push_back(fb::CreateTracedNode(b, b.CreateString(n.name), b.CreateString(n.op),
                                           n.span.start_ns, n.span.end_ns, n.span.thread,
                                           n.span.async, b.CreateString(n.transfer)));
    }
    devices.push_back(fb::CreateDeviceTrace(b, b.CreateString(d.device), b.CreateVector(nodes)));
  }
  return Finish(b, fb::CreateRunStepReply(b, fetches, b.CreateVector(devices)));
}

Result<RunStepReply> DecodeRunStepReply(std::string_view bytes) {
  constexpr std::string_view kWhat = "RunStep reply";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::RunStepReply* r, Root<fb::RunStepReply>(bytes, storage, kWhat));
  RunStepReply out;
  ASSIGN_OR_RETURN(out.fetches, GetIndexed(r->fetches(), kWhat, "fetches"));
  ASSIGN_OR_RETURN(uint32_t n, Count(r->devices(), kWhat, "devices"));
  for (uint32_t i = 0; i < n; ++i) {
    const fb::DeviceTrace* d = r->devices()->Get(i);
    DeviceTrace& trace = out.devices.emplace_back();
    trace.device = d->device()->str();
    ASSIGN_OR_RETURN(uint32_t nodes, Count(d->nodes(), kWhat, "nodes"));
    for (uint32_t k = 0; k < nodes; ++k) {
      const fb::TracedNode* t = d->nodes()->Get(k);
      trace.nodes.push_back({t->name()->str(), t->op()->str(),
                             NodeSpan{t->start_ns(), t->end_ns(), t->thread(), t->async()},
                             Str(t->transfer())});
    }
  }
  return out;
}

std::string Encode(const ReleaseRequest& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateReleaseRequest(b, b.CreateString(m.signature), m.end_job));
}

Result<ReleaseRequest> DecodeReleaseRequest(std::string_view bytes) {
  std::string storage;
  ASSIGN_OR_RETURN(const fb::ReleaseRequest* r,
                   Root<fb::ReleaseRequest>(bytes, storage, "Release request"));
  return ReleaseRequest{r->signature()->str(), r->end_job()};
}

std::string Encode(const ConnectPeersRequest& m) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::PeerAddress>> peers;
  for (const auto& [task, address] : m.peers) {
    peers.push_back(fb::CreatePeerAddress(b, b.CreateString(task), b.CreateString(address)));
  }
  return Finish(b, fb::CreateConnectPeersRequest(b, b.CreateVector(peers)));
}

Result<ConnectPeersRequest> DecodeConnectPeersRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "ConnectPeers request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::ConnectPeersRequest* r,
                   Root<fb::ConnectPeersRequest>(bytes, storage, kWhat));
  ASSIGN_OR_RETURN(uint32_t n, Count(r->peers(), kWhat, "peers"));
  ConnectPeersRequest out;
  for (uint32_t i = 0; i < n; ++i) {
    out.peers.emplace_back(r->peers()->Get(i)->task()->str(), r->peers()->Get(i)->address()->str());
  }
  return out;
}

namespace {

Offset<flatbuffers::Vector<Offset<fb::VariableRef>>> PutRefs(FlatBufferBuilder& b,
                                                             const std::vector<VariableRef>& refs) {
  std::vector<Offset<fb::VariableRef>> out;
  for (const VariableRef& v : refs) {
    out.push_back(fb::CreateVariableRef(b, b.CreateString(v.device), b.CreateString(v.name),
                                        v.offset, v.count,
                                        v.dims.empty() ? 0 : b.CreateVector(v.dims)));
  }
  return b.CreateVector(out);
}

Result<std::vector<VariableRef>> GetRefs(const flatbuffers::Vector<Offset<fb::VariableRef>>* list,
                                         std::string_view what) {
  ASSIGN_OR_RETURN(uint32_t n, Count(list, what, "variables"));
  std::vector<VariableRef> out;
  for (uint32_t i = 0; i < n; ++i) {
    const fb::VariableRef* r = list->Get(i);
    VariableRef v{Str(r->device()), r->name()->str(), r->offset(), r->count(), {}};
    if (v.offset < 0 || v.count < -1 || (v.count == -1 && v.offset != 0)) {
      return InvalidArgument("{}: variable '{}' has a slice at {} of {} elements", what, v.name,
                             v.offset, v.count);
    }
    if (r->dims() != nullptr) {
      if (r->dims()->size() > 8) {
        return InvalidArgument("{}: variable '{}' has {} dims", what, v.name, r->dims()->size());
      }
      for (int64_t d : *r->dims()) {
        if (d < 0) return InvalidArgument("{}: variable '{}' has a dim of {}", what, v.name, d);
        v.dims.push_back(d);
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::string Encode(const VariablesRequest& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateVariablesRequest(b, PutRefs(b, m.variables)));
}

Result<VariablesRequest> DecodeVariablesRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "ReadVariables request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::VariablesRequest* r,
                   Root<fb::VariablesRequest>(bytes, storage, kWhat));
  ASSIGN_OR_RETURN(std::vector<VariableRef> refs, GetRefs(r->variables(), kWhat));
  return VariablesRequest{std::move(refs)};
}

std::string Encode(const VariableValues& m) {
  FlatBufferBuilder b;
  auto refs = PutRefs(b, m.variables);
  std::vector<Offset<fb::Tensor>> values;
  for (const Tensor& t : m.values) values.push_back(PutTensor(b, t));
  return Finish(b, fb::CreateVariableValues(b, refs, b.CreateVector(values)));
}

Result<VariableValues> DecodeVariableValues(std::string_view bytes, std::string_view what) {
  std::string storage;
  ASSIGN_OR_RETURN(const fb::VariableValues* r, Root<fb::VariableValues>(bytes, storage, what));
  VariableValues out;
  ASSIGN_OR_RETURN(out.variables, GetRefs(r->variables(), what));
  ASSIGN_OR_RETURN(uint32_t n, Count(r->values(), what, "values"));
  if (n != out.variables.size()) {
    return InvalidArgument("{}: {} values for {} variables", what, n, out.variables.size());
  }
  for (uint32_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(Tensor value, sz::DecodeTensor(r->values()->Get(i), [&] {
                       return fmt::format("{}: variable '{}'", what, out.variables[i].name);
                     }));
    out.values.push_back(std::move(value));
  }
  return out;
}

std::string Encode(const MeasureLinksRequest& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateMeasureLinksRequest(b, PutStrings(b, m.tasks)));
}

Result<MeasureLinksRequest> DecodeMeasureLinksRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "MeasureLinks request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::MeasureLinksRequest* r,
                   Root<fb::MeasureLinksRequest>(bytes, storage, kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> tasks, GetStrings(r->tasks(), kWhat, "tasks"));
  return MeasureLinksRequest{std::move(tasks)};
}

std::string Encode(const MeasureLinksReply& m) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::MeasuredLink>> links;
  for (const MeasuredLinkInfo& l : m.links) {
    links.push_back(fb::CreateMeasuredLink(b, b.CreateString(l.task), l.latency_s, l.bandwidth));
  }
  return Finish(b, fb::CreateMeasureLinksReply(b, b.CreateVector(links)));
}

Result<MeasureLinksReply> DecodeMeasureLinksReply(std::string_view bytes) {
  constexpr std::string_view kWhat = "MeasureLinks reply";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::MeasureLinksReply* r,
                   Root<fb::MeasureLinksReply>(bytes, storage, kWhat));
  ASSIGN_OR_RETURN(uint32_t n, Count(r->links(), kWhat, "links"));
  MeasureLinksReply out;
  for (uint32_t i = 0; i < n; ++i) {
    const fb::MeasuredLink* l = r->links()->Get(i);
    out.links.push_back({l->task()->str(), l->latency_s(), l->bandwidth()});
  }
  return out;
}

std::string Encode(const RegisterRequest& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateRegisterRequest(b, m.rank, m.world_size, b.CreateString(m.address),
                                             PutStrings(b, m.devices), b.CreateString(m.launcher)));
}

Result<RegisterRequest> DecodeRegisterRequest(std::string_view bytes) {
  constexpr std::string_view kWhat = "Register request";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::RegisterRequest* r, Root<fb::RegisterRequest>(bytes, storage, kWhat));
  RegisterRequest out;
  out.rank = r->rank();
  out.world_size = r->world_size();
  out.address = Str(r->address());
  out.launcher = Str(r->launcher());
  if (out.rank < -1 || out.world_size < 0 || (out.world_size > 0 && out.rank >= out.world_size)) {
    return InvalidArgument("{}: rank {} of world size {} is out of range", kWhat, out.rank,
                           out.world_size);
  }
  if (out.address.empty() || out.address.size() > kMaxNameBytes) {
    return InvalidArgument("{}: field 'address' has {} bytes (1 to {})", kWhat, out.address.size(),
                           kMaxNameBytes);
  }
  if (out.launcher.size() > kMaxNameBytes) {
    return InvalidArgument("{}: field 'launcher' has {} bytes, over {}", kWhat, out.launcher.size(),
                           kMaxNameBytes);
  }
  ASSIGN_OR_RETURN(out.devices, GetStrings(r->devices(), kWhat, "devices"));
  if (out.devices.empty() || out.devices.size() > kMaxWorkerDevices) {
    return InvalidArgument("{}: {} devices (1 to {})", kWhat, out.devices.size(),
                           kMaxWorkerDevices);
  }
  return out;
}

std::string Encode(const RegisterReply& m) {
  FlatBufferBuilder b;
  return Finish(b, fb::CreateRegisterReply(b, b.CreateString(m.task), m.world_size));
}

Result<RegisterReply> DecodeRegisterReply(std::string_view bytes) {
  constexpr std::string_view kWhat = "Register reply";
  std::string storage;
  ASSIGN_OR_RETURN(const fb::RegisterReply* r, Root<fb::RegisterReply>(bytes, storage, kWhat));
  RegisterReply out{Str(r->task()), r->world_size()};
  if (out.world_size < 1) {
    return InvalidArgument("{}: world size {} is not positive", kWhat, out.world_size);
  }
  return out;
}

}  // namespace dflow::distributed
