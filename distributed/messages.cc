#include "distributed/messages.h"

#include <fmt/format.h>

#include "serialization/checkpoint_file.h"

namespace dflow::distributed {
namespace {

constexpr size_t kMaxMetaBytes = size_t{16} << 20;
constexpr uint32_t kMaxBlobs = 1 << 16;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t Get(std::string_view in, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
  return v;
}

// What errors name: "Compile request", or a reply as given ("GetDevices reply").
std::string Subject(std::string_view what) {
  if (what.size() >= 5 && what.substr(what.size() - 5) == "reply") return std::string(what);
  return fmt::format("{} request", what);
}

}  // namespace

std::string EncodeFrame(const Frame& frame) {
  std::string meta = frame.meta.dump();
  std::string out;
  PutU32(&out, static_cast<uint32_t>(meta.size()));
  out += meta;
  PutU32(&out, static_cast<uint32_t>(frame.blobs.size()));
  for (const auto& b : frame.blobs) {
    PutU64(&out, b.size());
    out += b;
  }
  return out;
}

Result<Frame> DecodeFrame(std::string_view bytes, std::string_view what) {
  auto bad = [&](std::string_view why) { return InvalidArgument("{}: {}", Subject(what), why); };
  if (bytes.size() < 4) return bad("truncated before its fields");
  uint64_t meta_size = Get(bytes, 0, 4);
  if (meta_size > kMaxMetaBytes || meta_size > bytes.size() - 4) {
    return bad(fmt::format("fields of {} bytes in a message of {}", meta_size, bytes.size()));
  }
  Frame frame;
  frame.meta =
      nlohmann::json::parse(bytes.substr(4, meta_size), nullptr, /*allow_exceptions=*/false);
  if (frame.meta.is_discarded() || !frame.meta.is_object())
    return bad("fields are not a JSON object");
  size_t pos = 4 + meta_size;
  if (bytes.size() - pos < 4) return bad("truncated before its blob count");
  uint64_t count = Get(bytes, pos, 4);
  pos += 4;
  if (count > kMaxBlobs) return bad(fmt::format("{} blobs", count));
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - pos < 8) return bad(fmt::format("truncated at blob {}", i));
    uint64_t n = Get(bytes, pos, 8);
    pos += 8;
    if (n > bytes.size() - pos) return bad(fmt::format("blob {} of {} bytes is truncated", i, n));
    frame.blobs.emplace_back(bytes.substr(pos, n));
    pos += n;
  }
  if (pos != bytes.size())
    return bad(fmt::format("{} bytes trail the last blob", bytes.size() - pos));
  return frame;
}

std::string EncodeTensors(const std::map<std::string, Tensor>& tensors) {
  return serialization::EncodeCheckpoint(tensors);
}

Result<std::map<std::string, Tensor>> DecodeTensors(std::string_view bytes, std::string_view what) {
  return serialization::DecodeCheckpoint(bytes, std::string(what));
}

Result<std::string> GetString(const nlohmann::json& meta, const char* field,
                              std::string_view what) {
  auto it = meta.find(field);
  if (it == meta.end() || !it->is_string()) {
    return InvalidArgument("{}: field '{}' is missing or not a string", Subject(what), field);
  }
  return it->get<std::string>();
}

Result<int64_t> GetInt(const nlohmann::json& meta, const char* field, std::string_view what) {
  auto it = meta.find(field);
  if (it == meta.end() || !it->is_number_integer()) {
    return InvalidArgument("{}: field '{}' is missing or not an integer", Subject(what), field);
  }
  return it->get<int64_t>();
}

Result<bool> GetBool(const nlohmann::json& meta, const char* field, bool otherwise,
                     std::string_view what) {
  auto it = meta.find(field);
  if (it == meta.end()) return otherwise;
  if (!it->is_boolean()) {
    return InvalidArgument("{}: field '{}' is not true or false", Subject(what), field);
  }
  return it->get<bool>();
}

Result<double> GetNumber(const nlohmann::json& meta, const char* field, double otherwise,
                         std::string_view what) {
  auto it = meta.find(field);
  if (it == meta.end()) return otherwise;
  if (!it->is_number()) {
    return InvalidArgument("{}: field '{}' is not a number", Subject(what), field);
  }
  return it->get<double>();
}

Result<std::vector<std::string>> GetStrings(const nlohmann::json& meta, const char* field,
                                            std::string_view what) {
  auto it = meta.find(field);
  if (it == meta.end() || !it->is_array()) {
    return InvalidArgument("{}: field '{}' is missing or not a list", Subject(what), field);
  }
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) {
      return InvalidArgument("{}: field '{}' holds a non-string", Subject(what), field);
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace dflow::distributed
