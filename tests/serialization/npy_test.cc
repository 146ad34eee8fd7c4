// NumPy .npy files: a file laid out by hand the way numpy.save writes it, round trips of every
// dtype NumPy has, and the files dflow refuses.
#include "serialization/npy.h"

#include <gtest/gtest.h>

#include <cstring>

#include "test_util.h"

namespace dflow::serialization {
namespace {

using testing::MessageHas;

// numpy.save(f, numpy.arange(6, dtype=numpy.float32).reshape(2, 3)), byte for byte: magic,
// version 1.0, a little-endian header length, the header padded with spaces to a 64-byte
// boundary and ended by a newline, then the data.
std::string NumpyArange6() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  size_t total = (10 + header.size() + 1 + 63) / 64 * 64;  // magic..length, header, newline
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + '\x01' + '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (int i = 0; i < 6; ++i) {
    float v = static_cast<float>(i);
    out.append(reinterpret_cast<const char*>(&v), 4);
  }
  return out;
}

TEST(NpyTest, ReadsWhatNumpyWritesAndWritesTheSameBytes) {
  std::string file = NumpyArange6();
  ASSERT_EQ((file.size() - 24) % 64, 0u);  // data starts 64-aligned
  auto t = DecodeNpy(file, "arange.npy");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype(), DType::kF32);
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->ToVector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  auto encoded = EncodeNpy(*t);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(*encoded, file);
}

TEST(NpyTest, EveryNumpyDTypeAndRankRoundTrips) {
  std::vector<DType> dtypes = {DType::kF32, DType::kF64, DType::kF16, DType::kI32,
                               DType::kI64, DType::kU8,  DType::kBool};
  std::vector<Shape> shapes = {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 0, 4}, Shape{1, 2, 1, 3}};
  std::string path = ::testing::TempDir() + "/t.npy";
  for (DType dtype : dtypes) {
    for (const Shape& shape : shapes) {
      Tensor t(dtype, shape);
      auto* p = static_cast<uint8_t*>(t.raw_data());
      uint8_t mask = dtype == DType::kBool ? 1 : 0xff;
      for (size_t i = 0; i < t.num_bytes(); ++i) p[i] = static_cast<uint8_t>(i * 13 + 1) & mask;
      ASSERT_TRUE(WriteNpy(t, path).ok());
      auto back = ReadNpy(path);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->dtype(), dtype);
      EXPECT_EQ(back->shape(), shape);
      EXPECT_EQ(std::memcmp(back->raw_data(), t.raw_data(), t.num_bytes()), 0);
    }
  }
  Tensor bf(DType::kBF16, Shape{2});
  auto no = EncodeNpy(bf);
  EXPECT_EQ(no.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(no.status(), {"bf16"}));
}

TEST(NpyTest, RefusedFilesSayWhy) {
  std::string good = NumpyArange6();
  auto with_header = [&](const std::string& from, const std::string& to) {
    std::string f = good;
    size_t at = f.find(from);
    EXPECT_NE(at, std::string::npos);
    f.replace(at, from.size(), to);
    return f;
  };
  struct Case {
    std::string bytes;
    std::vector<std::string> words;
  };
  std::vector<Case> cases = {
      {"not numpy", {"not a .npy file"}},
      {with_header("'<f4'", "'>f4'"), {"big-endian", "'>f4'"}},
      {with_header("False", "True "), {"Fortran"}},
      {with_header("'<f4'", "'<c8'"), {"'<c8'", "not supported"}},
      {with_header("(2, 3)", "(2, 4)"), {"needs 32 bytes", "has 24"}},
      {with_header("(2, 3)", "(9, 9)"), {"needs 324 bytes"}},
      {with_header("(2, 3)", "(2, x)"), {"bad shape"}},
      {good.substr(0, good.size() - 1), {"needs 24 bytes", "has 23"}},
      {good.substr(0, 40), {"header says"}},
  };
  std::string huge = with_header("(2, 3)", "(999999999999, 99)");
  cases.push_back({huge, {"needs", "bytes"}});
  for (const Case& c : cases) {
    auto t = DecodeNpy(c.bytes, "bad.npy");
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.words[0];
    std::vector<std::string> words = c.words;
    words.push_back("'bad.npy'");
    EXPECT_TRUE(MessageHas(t.status(), words)) << t.status().ToString();
  }
  auto missing = ReadNpy(::testing::TempDir() + "/missing.npy");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dflow::serialization
