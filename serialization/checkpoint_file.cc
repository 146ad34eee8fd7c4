#include "serialization/checkpoint_file.h"

#include <algorithm>
#include <vector>

#include "serialization/file_util.h"
#include "serialization/schema/checkpoint_generated.h"
#include "serialization/tensor_codec.h"
#include "serialization/verified_root.h"

namespace dflow::serialization {

namespace {

size_t EncodedSize(const std::map<std::string, Tensor>& variables) {
  size_t bytes = 1024;
  for (const auto& [name, t] : variables) bytes += t.num_bytes() + name.size() + 64;
  return bytes;
}

// Where a tensor's bytes go in an encoded checkpoint, counted from the buffer's end (FlatBuffers
// builds back to front, so that distance stays put as the buffer grows).
struct DataRegion {
  size_t from_end = 0;
  const Tensor* tensor = nullptr;
};

// The checkpoint's bytes in `b` (cleared first). With `regions`, the tensors' bytes are left
// out (their room in the buffer is not written) and listed there instead.
std::string_view Encode(const std::map<std::string, Tensor>& variables,
                        flatbuffers::FlatBufferBuilder& b, std::vector<DataRegion>* regions) {
  b.Clear();
  std::vector<flatbuffers::Offset<fb::Variable>> vars;
  for (const auto& [name, t] : variables) {
    flatbuffers::Offset<fb::Tensor> value;
    if (regions == nullptr) {
      value = EncodeTensor(b, t);
    } else {
      uint8_t* room = nullptr;
      auto data = b.CreateUninitializedVector(t.num_bytes(), 1, &room);
      regions->push_back(
          {b.GetSize() - static_cast<size_t>(room - b.GetCurrentBufferPointer()), &t});
      value = EncodeTensorAround(b, t, flatbuffers::Offset<flatbuffers::Vector<uint8_t>>(data));
    }
    vars.push_back(fb::CreateVariable(b, b.CreateString(name), value));
  }
  auto vec = b.CreateVector(vars);
  b.Finish(fb::CreateCheckpoint(b, kCheckpointFormatVersion, vec), fb::CheckpointIdentifier());
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

}  // namespace

std::string EncodeCheckpoint(const std::map<std::string, Tensor>& variables) {
  flatbuffers::FlatBufferBuilder b(EncodedSize(variables));
  return std::string(Encode(variables, b, nullptr));
}

struct CheckpointWriter::Buffer {
  flatbuffers::FlatBufferBuilder builder{1024};
  std::vector<DataRegion> regions;
  std::vector<std::string_view> pieces;
};

CheckpointWriter::CheckpointWriter() : buffer_(std::make_unique<Buffer>()) {}
CheckpointWriter::~CheckpointWriter() = default;

Status CheckpointWriter::Save(const std::map<std::string, Tensor>& variables,
                              const std::string& path, const std::string& scratch, bool sync) {
  auto& regions = buffer_->regions;
  auto& pieces = buffer_->pieces;
  regions.clear();
  pieces.clear();
  std::string_view all = Encode(variables, buffer_->builder, &regions);
  // The buffer's bytes around the tensors', in file order.
  std::sort(regions.begin(), regions.end(),
            [](const DataRegion& a, const DataRegion& b) { return a.from_end > b.from_end; });
  size_t at = 0;
  for (const DataRegion& r : regions) {
    const size_t start = all.size() - r.from_end;
    pieces.push_back(all.substr(at, start - at));
    pieces.emplace_back(static_cast<const char*>(r.tensor->raw_data()), r.tensor->num_bytes());
    at = start + r.tensor->num_bytes();
  }
  pieces.push_back(all.substr(at));
  return scratch.empty() ? WriteFileAtomically(path, pieces)
                         : WriteFileThrough(scratch, path, pieces, sync);
}

Result<std::map<std::string, Tensor>> DecodeCheckpoint(std::string_view bytes,
                                                       const std::string& source) {
  ASSIGN_OR_RETURN(
      const fb::Checkpoint* c,
      VerifiedRoot<fb::Checkpoint>(bytes, source, "checkpoint", fb::CheckpointIdentifier(),
                                   kCheckpointFormatVersion));
  std::map<std::string, Tensor> out;
  if (c->variables() == nullptr) return out;
  for (const fb::Variable* v : *c->variables()) {
    std::string where = fmt::format("checkpoint '{}': variable '{}'", source, v->name()->str());
    ASSIGN_OR_RETURN(Tensor t, DecodeTensor(v->value(), where));
    if (!out.emplace(v->name()->str(), std::move(t)).second) {
      return InvalidArgument("{} is given twice", where);
    }
  }
  return out;
}

Status SaveCheckpoint(const std::map<std::string, Tensor>& variables, const std::string& path) {
  flatbuffers::FlatBufferBuilder b(EncodedSize(variables));
  return WriteFileAtomically(path, Encode(variables, b, nullptr));
}

Result<std::map<std::string, Tensor>> LoadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeCheckpoint(bytes, path);
}

}  // namespace dflow::serialization
