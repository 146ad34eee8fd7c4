// IDX reading (real files written here, compressed and not), damaged files with errors naming
// the file, Fashion-MNIST from the Debian package, and the batcher.
#include "runtime/train/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dflow_idx_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz) {
    std::string path = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }

  static std::vector<uint8_t> Idx(std::vector<uint32_t> dims, size_t data_bytes) {
    std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    }
    for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i * 7));
    return b;
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, ReadsPlainAndCompressed) {
  for (bool gz : {false, true}) {
    auto t = ReadIdx(Write(gz ? "a.gz" : "a", Idx({2, 3, 4}, 24), gz));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype(), DType::kU8);
    EXPECT_EQ(t->shape(), Shape({2, 3, 4}));
    for (int i = 0; i < 24; ++i) EXPECT_EQ(t->data<uint8_t>()[i], static_cast<uint8_t>(i * 7));
  }
}

TEST_F(IdxTest, DamagedFilesNameTheFile) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string why;
  };
  auto wrong_type = Idx({4}, 4);
  wrong_type[2] = 0x0D;
  auto bad_magic = Idx({4}, 4);
  bad_magic[0] = 7;
  std::vector<Case> cases = {
      {"truncated_data", Idx({10, 10}, 50), "declares 100 bytes of data but the file holds 50"},
      {"trailing", Idx({2}, 5), "declares 2 bytes"},
      {"bad_magic", bad_magic, "bad magic number"},
      {"wrong_type", wrong_type, "element type 0x0d"},
      {"short_header", {0, 0, 8, 3, 0, 0}, "truncated inside its header"},
      {"huge_claim", Idx({0xFFFFFF, 0xFFFFFF, 0xFFFFFF}, 10), "too much data"},
      {"empty", {}, "bad magic number"},
  };
  for (const auto& c : cases) {
    std::string path = Write(c.name, c.bytes, false);
    auto t = ReadIdx(path);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_TRUE(MessageHas(t.status(), {path, c.why})) << c.name;
  }
  auto missing = ReadIdx((dir_ / "nope.gz").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"nope.gz"}));
}

TEST_F(IdxTest, MissingFashionMnistNamesTheFile) {
  auto d = LoadFashionMnist(true, dir_.string());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(d.status(), {"train-images-idx3-ubyte.gz"}));
}

TEST(FashionMnistTest, LoadsTheDebianPackage) {
  auto test = LoadFashionMnist(false);
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  EXPECT_EQ(test->images.shape(), Shape({10000, 784}));
  EXPECT_EQ(test->labels.shape(), Shape({10000}));
  std::vector<int> counts(10, 0);
  for (int32_t l : test->labels.flat<int32_t>()) counts[l]++;
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test split is balanced
  float max = 0;
  for (float v : test->images.flat<float>()) max = std::max(max, v);
  EXPECT_EQ(max, 1.0f);
}

TEST(BatcherTest, ShufflesReproduciblyAndCoversEveryExample) {
  Dataset d{Tensor(DType::kF32, Shape{10, 1}), Tensor(DType::kI32, Shape{10})};
  for (int i = 0; i < 10; ++i) {
    d.images.data<float>()[i] = static_cast<float>(i);
    d.labels.data<int32_t>()[i] = i;
  }
  auto epoch_order = [&](uint64_t seed, int epoch, bool drop_last) {
    Batcher b(d, 3, seed, true, drop_last);
    b.StartEpoch(epoch);
    std::vector<int32_t> order;
    Tensor x, y;
    while (b.Next(&x, &y)) {
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        EXPECT_EQ(x.data<float>()[i], static_cast<float>(y.data<int32_t>()[i]));
        order.push_back(y.data<int32_t>()[i]);
      }
    }
    return order;
  };
  auto a = epoch_order(5, 0, false);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(std::set<int32_t>(a.begin(), a.end()).size(), 10u);
  EXPECT_EQ(a, epoch_order(5, 0, false));
  EXPECT_NE(a, epoch_order(5, 1, false));
  EXPECT_NE(a, epoch_order(6, 0, false));
  EXPECT_EQ(epoch_order(5, 0, true).size(), 9u);
  EXPECT_EQ(Batcher(d, 3, 0, true, true).batches_per_epoch(), 3);
  EXPECT_EQ(Batcher(d, 3, 0, true, false).batches_per_epoch(), 4);
}

}  // namespace
}  // namespace dflow
