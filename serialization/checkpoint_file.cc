#include "serialization/checkpoint_file.h"

#include "serialization/file_util.h"
#include "serialization/schema/checkpoint_generated.h"
#include "serialization/tensor_codec.h"

namespace dflow::serialization {

std::string EncodeCheckpoint(const std::map<std::string, Tensor>& variables) {
  size_t bytes = 1024;
  for (const auto& [name, t] : variables) bytes += t.num_bytes() + name.size() + 64;
  flatbuffers::FlatBufferBuilder b(bytes);
  std::vector<flatbuffers::Offset<fb::Variable>> vars;
  for (const auto& [name, t] : variables) {
    auto value = EncodeTensor(b, t);
    vars.push_back(fb::CreateVariable(b, b.CreateString(name), value));
  }
  auto vec = b.CreateVector(vars);
  b.Finish(fb::CreateCheckpoint(b, kCheckpointFormatVersion, vec), fb::CheckpointIdentifier());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

Result<std::map<std::string, Tensor>> DecodeCheckpoint(std::string_view bytes,
                                                       const std::string& source) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(data, fb::CheckpointIdentifier())) {
    return InvalidArgument("checkpoint '{}' is not a dflow checkpoint (no \"{}\" identifier)",
                           source, fb::CheckpointIdentifier());
  }
  flatbuffers::Verifier verifier(data, bytes.size(), 64,
                                 static_cast<flatbuffers::uoffset_t>(bytes.size() / 4 + 16));
  if (!fb::VerifyCheckpointBuffer(verifier)) {
    return InvalidArgument(
        "checkpoint '{}' is corrupt or truncated (FlatBuffers verification failed)", source);
  }
  const fb::Checkpoint* c = fb::GetCheckpoint(data);
  if (c->version() > kCheckpointFormatVersion) {
    return InvalidArgument("checkpoint '{}' has format version {}; this build reads up to {}",
                           source, c->version(), kCheckpointFormatVersion);
  }
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
  return WriteFileAtomically(path, EncodeCheckpoint(variables));
}

Result<std::map<std::string, Tensor>> LoadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeCheckpoint(bytes, path);
}

}  // namespace dflow::serialization
