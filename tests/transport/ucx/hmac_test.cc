// SHA-256 and HMAC-SHA256 against independent references: FIPS 180-4's "abc", RFC 4231's test
// cases, and digests Python's hashlib and hmac gave for messages at every padding boundary.
#include "transport/ucx/hmac.h"

#include <gtest/gtest.h>

#include <string>

namespace dflow::transport {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string Pattern(size_t n) {
  std::string m;
  for (size_t i = 0; i < n; ++i) m.push_back(static_cast<char>((i * 7 + 1) % 256));
  return m;
}

TEST(HmacTest, Sha256MatchesTheReferences) {
  EXPECT_EQ(Hex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-4
  const std::pair<size_t, const char*> python[] = {
      {0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {3, "ce562c676ea7aba9812f54db146b0096011bf3e423edfb0a6f8fb2b02674a801"},
      {55, "16fa57a0a3423a715d594516339f36189d6b5f93754a9714fef202616a9fabfe"},
      {56, "c37b44e5f1b18554b36966f4f8e08bfbf3164c4b6c10374d12d89850892073c5"},
      {63, "bbba992d2c85af960fb2987a1fd05e0aa82a3db3c740dd8982a9e273b75e36a3"},
      {64, "66bd4633ed6f71c4ecfa4763bf7ba1c8ec7612de9aa6c0578a7b675207c71e0b"},
      {65, "9f7dc47107b750a1f3d35db5d9547f24ef40da5b731b9540d4f43710a154f6c9"},
      {119, "a3ed307b730fa77c07531300c6e4a282330011d4d4caf6bb7b63ae05950f4b66"},
      {120, "8e3b15d9fea7472655aa069620b7f8c2e55ee1499f763200a7515fe826e99d20"},
      {200, "397276ea1f65a10cbd90e9d622ab533cf9fc4e14056fc9915feb8f4a52d47dc7"},
  };
  for (const auto& [n, digest] : python) EXPECT_EQ(Hex(Sha256(Pattern(n))), digest) << n;
}

TEST(HmacTest, HmacMatchesRfc4231AndPython) {
  // RFC 4231, test cases 1 and 2.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than a block (hashed first).
  std::string key;
  for (int i = 0; i < 100; ++i) key.push_back(static_cast<char>(i));
  std::string message;
  for (int i = 0; i < 30; ++i) message += "dflow";
  EXPECT_EQ(Hex(HmacSha256(key, message)),
            "fee3d098ec4d055fb5f1f22d47f3bebe2ad77f1f01433c20b8676564343086ba");
}

TEST(HmacTest, HandshakeProofsDependOnEveryFieldAndItsBoundaries) {
  const std::string a = HandshakeProof("token", "hello", {"ab", "c"});
  EXPECT_EQ(a.size(), kSha256Bytes);
  EXPECT_EQ(a, HandshakeProof("token", "hello", {"ab", "c"}));
  EXPECT_NE(a, HandshakeProof("token", "hello", {"a", "bc"}));  // framed, not concatenated
  EXPECT_NE(a, HandshakeProof("token", "reply", {"ab", "c"}));
  EXPECT_NE(a, HandshakeProof("tokens", "hello", {"ab", "c"}));
}

}  // namespace
}  // namespace dflow::transport
