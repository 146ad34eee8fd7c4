// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the handshake's proof that both sides of
// a connection know the cluster token without sending it (transport/ucx/wire.h, Challenge).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace dflow::transport {

inline constexpr size_t kSha256Bytes = 32;

// The 32-byte digest of `message`.
std::string Sha256(std::string_view message);
// The 32-byte HMAC-SHA256 of `message` under `key`.
std::string HmacSha256(std::string_view key, std::string_view message);
// HMAC-SHA256 under `token` of `label` and `fields`, each framed by its u32 length (so no two
// lists of fields give the same bytes): what a handshake message carries as its proof.
std::string HandshakeProof(std::string_view token, std::string_view label,
                           std::initializer_list<std::string_view> fields);

}  // namespace dflow::transport
