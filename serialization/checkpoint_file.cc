#include "serialization/checkpoint_file.h"

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

// The checkpoint's bytes in `b` (cleared first).
std::string_view Encode(const std::map<std::string, Tensor>& variables,
                        flatbuffers::FlatBufferBuilder& b) {
  b.Clear();
  std::vector<flatbuffers::Offset<fb::Variable>> vars;
  for (const auto& [name, t] : variables) {
    auto value = EncodeTensor(b, t);
    vars.push_back(fb::CreateVariable(b, b.CreateString(name), value));
  }
  auto vec = b.CreateVector(vars);
  b.Finish(fb::CreateCheckpoint(b, kCheckpointFormatVersion, vec), fb::CheckpointIdentifier());
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

}  // namespace

std::string EncodeCheckpoint(const std::map<std::string, Tensor>& variables) {
  flatbuffers::FlatBufferBuilder b(EncodedSize(variables));
  return std::string(Encode(variables, b));
}

struct CheckpointWriter::Buffer {
  flatbuffers::FlatBufferBuilder builder{1024};
};

CheckpointWriter::CheckpointWriter() : buffer_(std::make_unique<Buffer>()) {}
CheckpointWriter::~CheckpointWriter() = default;

Status CheckpointWriter::Save(const std::map<std::string, Tensor>& variables,
                              const std::string& path) {
  return WriteFileAtomically(path, Encode(variables, buffer_->builder));
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
  return WriteFileAtomically(path, Encode(variables, b));
}

Result<std::map<std::string, Tensor>> LoadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeCheckpoint(bytes, path);
}

}  // namespace dflow::serialization
