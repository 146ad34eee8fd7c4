#include "framework/rendezvous_key.h"

#include <unistd.h>

#include <chrono>
#include <random>

namespace dflow {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64's finaliser over the running hash xor the value.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

void PutU16(std::string& out, uint16_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>(v >> 8);
}
template <typename T>
void PutInt(std::string& out, T v) {
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((u >> (8 * i)) & 0xff);
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  Status Int(const char* field, T* v) {
    if (in_.size() - pos_ < sizeof(T)) return Truncated(field);
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<std::make_unsigned_t<T>>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(T);
    *v = static_cast<T>(u);
    return Status::OK();
  }
  Status Name(const char* field, std::string* s) {
    uint16_t len = 0;
    RETURN_IF_ERROR(Int(field, &len));
    if (len > RendezvousKey::kMaxNameBytes) {
      return InvalidArgument("rendezvous key: {} is {} bytes, more than the limit of {}", field,
                             len, RendezvousKey::kMaxNameBytes);
    }
    if (in_.size() - pos_ < len) return Truncated(field);
    s->assign(in_.substr(pos_, len));
    pos_ += len;
    return Status::OK();
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  Status Truncated(const char* field) const {
    return InvalidArgument("rendezvous key: truncated at {} (byte {} of {})", field, pos_,
                           in_.size());
  }
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

uint64_t RendezvousKey::Hash() const {
  std::hash<std::string_view> h;
  uint64_t x = Mix(0, h(src_device));
  x = Mix(x, src_incarnation);
  x = Mix(x, h(dst_device));
  x = Mix(x, h(tensor));
  x = Mix(x, static_cast<uint64_t>(step_id));
  return Mix(x, (static_cast<uint64_t>(frame_id) << 32) | iteration);
}

std::string RendezvousKey::Encode() const {
  std::string out;
  out.reserve(1 + 6 + src_device.size() + dst_device.size() + tensor.size() + 8 + 8 + 8);
  out += static_cast<char>(kVersion);
  auto name = [&](const std::string& s) {
    // Names are bounded by Decode; a longer one is a programmer error caught here, not on the
    // peer.
    DFLOW_CHECK(s.size() <= kMaxNameBytes);
    PutU16(out, static_cast<uint16_t>(s.size()));
    out += s;
  };
  name(src_device);
  PutInt(out, src_incarnation);
  name(dst_device);
  name(tensor);
  PutInt(out, step_id);
  PutInt(out, frame_id);
  PutInt(out, iteration);
  return out;
}

Result<RendezvousKey> RendezvousKey::Decode(std::string_view bytes) {
  Reader r(bytes);
  uint8_t version = 0;
  RETURN_IF_ERROR(r.Int("version", &version));
  if (version != kVersion) {
    return InvalidArgument("rendezvous key: version {}, this build reads version {}", version,
                           kVersion);
  }
  RendezvousKey k;
  RETURN_IF_ERROR(r.Name("src_device", &k.src_device));
  RETURN_IF_ERROR(r.Int("src_incarnation", &k.src_incarnation));
  RETURN_IF_ERROR(r.Name("dst_device", &k.dst_device));
  RETURN_IF_ERROR(r.Name("tensor", &k.tensor));
  RETURN_IF_ERROR(r.Int("step_id", &k.step_id));
  RETURN_IF_ERROR(r.Int("frame_id", &k.frame_id));
  RETURN_IF_ERROR(r.Int("iteration", &k.iteration));
  if (r.remaining() != 0) {
    return InvalidArgument("rendezvous key: {} trailing bytes", r.remaining());
  }
  return k;
}

std::string RendezvousKey::ToString() const {
  std::string s =
      fmt::format("{};{:x};{};{};{}", src_device, src_incarnation, dst_device, tensor, step_id);
  if (frame_id != 0 || iteration != 0) s += fmt::format(";{};{}", frame_id, iteration);
  return s;
}

uint64_t ProcessIncarnation() {
  static const uint64_t incarnation = [] {
    std::random_device rd;
    uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    x = Mix(x, static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
    x = Mix(x, static_cast<uint64_t>(getpid()));
    return x == 0 ? 1 : x;
  }();
  return incarnation;
}

}  // namespace dflow
