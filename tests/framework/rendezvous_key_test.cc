#include "framework/rendezvous_key.h"

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

RendezvousKey Sample() {
  RendezvousKey k;
  k.src_device = "/job:worker/task:1/device:GPU:0";
  k.src_incarnation = 0x0123456789abcdefULL;
  k.dst_device = "/job:ps/task:0/device:CPU:0";
  k.tensor = "layer1/matmul:0";
  k.step_id = -7;  // negative values survive the unsigned encoding
  k.frame_id = 3;
  k.iteration = 0xfffffffeu;
  return k;
}

TEST(RendezvousKeyTest, EncodeDecodeRoundTripsEveryField) {
  RendezvousKey k = Sample();
  std::string bytes = k.Encode();
  // version + 3 length-prefixed names + incarnation + step + frame + iteration
  EXPECT_EQ(bytes.size(), 1 + 3 * 2 + k.src_device.size() + k.dst_device.size() + k.tensor.size() +
                              8 + 8 + 4 + 4);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), RendezvousKey::kVersion);
  auto back = RendezvousKey::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, k);
  EXPECT_EQ(back->Hash(), k.Hash());
}

TEST(RendezvousKeyTest, TheBinaryFormIsFixedLittleEndian) {
  RendezvousKey k;
  k.src_device = "a";
  k.src_incarnation = 0x0102030405060708ULL;
  k.dst_device = "b";
  k.tensor = "t";
  k.step_id = 0x1122;
  std::string want = std::string("\x01", 1) + std::string("\x01\x00", 2) + "a" +
                     std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) +
                     std::string("\x01\x00", 2) + "b" + std::string("\x01\x00", 2) + "t" +
                     std::string("\x22\x11\x00\x00\x00\x00\x00\x00", 8) + std::string(8, '\0');
  EXPECT_EQ(k.Encode(), want);
}

TEST(RendezvousKeyTest, DecodeRefusesDamagedInput) {
  std::string bytes = Sample().Encode();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = RendezvousKey::Decode(std::string_view(bytes).substr(0, cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto trailing = RendezvousKey::Decode(bytes + "x");
  EXPECT_TRUE(MessageHas(trailing.status(), {"1 trailing bytes"}));
  std::string version = bytes;
  version[0] = 9;
  EXPECT_TRUE(MessageHas(RendezvousKey::Decode(version).status(), {"version 9"}));
  // A name length over the limit.
  std::string huge = bytes;
  huge[1] = '\xff';
  huge[2] = '\xff';
  EXPECT_TRUE(MessageHas(RendezvousKey::Decode(huge).status(), {"src_device", "65535 bytes"}));
}

TEST(RendezvousKeyTest, HashSeparatesKeysDifferingInOneField) {
  std::set<uint64_t> hashes;
  RendezvousKey k = Sample();
  hashes.insert(k.Hash());
  for (int field = 0; field < 7; ++field) {
    RendezvousKey o = k;
    switch (field) {
      case 0:
        o.src_device += "x";
        break;
      case 1:
        o.src_incarnation++;
        break;
      case 2:
        o.dst_device += "x";
        break;
      case 3:
        o.tensor += "x";
        break;
      case 4:
        o.step_id++;
        break;
      case 5:
        o.frame_id++;
        break;
      case 6:
        o.iteration++;
        break;
    }
    EXPECT_NE(o, k);
    hashes.insert(o.Hash());
  }
  EXPECT_EQ(hashes.size(), 8u);
  // Fields do not bleed into each other.
  RendezvousKey a, b;
  a.src_device = "ab";
  a.dst_device = "c";
  b.src_device = "a";
  b.dst_device = "bc";
  EXPECT_NE(a.Encode(), b.Encode());
  EXPECT_NE(a.Hash(), b.Hash());
}

TEST(RendezvousKeyTest, ToStringNamesEveryField) {
  EXPECT_EQ(Sample().ToString(),
            "/job:worker/task:1/device:GPU:0;123456789abcdef;/job:ps/task:0/device:CPU:0;"
            "layer1/matmul:0;-7;3;4294967294");
}

TEST(RendezvousKeyTest, ProcessIncarnationIsStableAndNonZero) {
  EXPECT_NE(ProcessIncarnation(), 0u);
  EXPECT_EQ(ProcessIncarnation(), ProcessIncarnation());
}

}  // namespace
}  // namespace dflow
