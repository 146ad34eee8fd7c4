// The checks every file format runs before reading a byte of content: the file identifier,
// the FlatBuffers verifier (every offset, string and vector within the file), and the format
// version.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "graph/status.h"

namespace dflow::serialization {

// The root table of `bytes` as a `Root`, or InvalidArgument "<kind> '<source>' ...". `kind`
// names the format in messages ("graph file", "checkpoint").
template <typename Root>
Result<const Root*> VerifiedRoot(std::string_view bytes, const std::string& source,
                                 const char* kind, const char* identifier, uint32_t version) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(data, identifier)) {
    return InvalidArgument("{} '{}' is not a dflow {} (no \"{}\" identifier)", kind, source, kind,
                           identifier);
  }
  // Every table counts against max_tables: allow as many as the bytes could hold.
  flatbuffers::Verifier verifier(data, bytes.size(), 64,
                                 static_cast<flatbuffers::uoffset_t>(bytes.size() / 4 + 16));
  if (!verifier.VerifyBuffer<Root>(identifier)) {
    return InvalidArgument("{} '{}' is corrupt or truncated (FlatBuffers verification failed)",
                           kind, source);
  }
  const Root* root = flatbuffers::GetRoot<Root>(data);
  if (root->version() > version) {
    return InvalidArgument("{} '{}' has format version {}; this build reads up to {}", kind, source,
                           root->version(), version);
  }
  return root;
}

// The values of a verified vector of 8-byte scalars (or any scalars), copied bytewise: the
// verifier aligns a vector's length but not its 8-byte elements, which a hostile file can
// misalign. Little-endian hosts only, as FlatBuffers' own accessors.
template <typename T>
std::vector<T> ScalarsOf(const flatbuffers::Vector<T>* v) {
  static_assert(std::is_arithmetic_v<T>);
  std::vector<T> out;
  if (v == nullptr) return out;
  out.resize(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

}  // namespace dflow::serialization
