// Checkpoints: the file round trip, damaged files, and Session::SaveCheckpoint and
// RestoreCheckpoint with their errors.
#include "serialization/checkpoint_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace dflow::serialization {
namespace {

using testing::MessageHas;

TEST(CheckpointFileTest, RoundTripAndDamagedFiles) {
  std::map<std::string, Tensor> vars = {
      {"w", Tensor::FromVector(testing::RandomFloats(12, 1), Shape{3, 4})},
      {"step", Tensor::Scalar<int64_t>(42)},
      {"empty", Tensor(DType::kF32, Shape{0, 5})}};
  std::string path = ::testing::TempDir() + "/vars.dfckpt";
  ASSERT_TRUE(SaveCheckpoint(vars, path).ok());
  // Written atomically: no temporary file is left beside it.
  for (const auto& entry : std::filesystem::directory_iterator(::testing::TempDir())) {
    EXPECT_EQ(entry.path().filename().string().find("vars.dfckpt.tmp"), std::string::npos);
  }
  auto loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 3u);
  for (const auto& [name, t] : vars) {
    const Tensor& u = loaded->at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(u.raw_data(), t.raw_data(), t.num_bytes()), 0) << name;
  }
  std::string good = EncodeCheckpoint(vars);
  for (size_t n = 0; n < good.size(); n += 3) {
    auto r = DecodeCheckpoint(std::string_view(good).substr(0, n), "cut.dfckpt");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
    EXPECT_TRUE(MessageHas(r.status(), {"'cut.dfckpt'"})) << r.status().ToString();
  }
  auto missing = LoadCheckpoint(::testing::TempDir() + "/none.dfckpt");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"none.dfckpt"}));
}

struct Model {
  Scope root = Scope::NewRootScope();
  std::string init, bump;
  Model() {
    auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{2, 2},
                                      ops::Initializer::GlorotUniform(3));
    init = w.init.node_name();
    bump =
        ops::Assign(root.WithOpName("bump"), w.var, ops::Add(root, w.var, ops::Const(root, 1.0f)))
            .node_name();
    ops::Identity(root.WithOpName("read"), w.var);
  }
};

std::unique_ptr<Session> Make(const Scope& root, const SessionOptions& options = {}) {
  auto s = Session::Create(root, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

std::vector<float> Read(Session& s) { return s.Run({}, {"read"})->at(0).ToVector<float>(); }

// One writer, one checkpoint after another (its buffer kept): each file loads back as written,
// a smaller one after a bigger one included, and matches SaveCheckpoint's bytes although the
// values go to the file from where they lie.
TEST(CheckpointFileTest, AWriterReusesItsBufferAcrossCheckpoints) {
  CheckpointWriter writer;
  for (int n : {300'000, 10, 1000}) {
    std::map<std::string, Tensor> vars;
    vars["w"] = Tensor::FromVector<float>(std::vector<float>(n, 0.5f * n), Shape{n});
    vars["step"] = Tensor::FromVector<int64_t>({int64_t{n}}, Shape{});
    vars["empty"] = Tensor(DType::kF64, Shape{0, 3});
    std::vector<int32_t> ramp(n / 10 + 1);
    for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<int32_t>(i * 7 - 3);
    vars["ramp"] = Tensor::FromVector<int32_t>(ramp, Shape{static_cast<int64_t>(ramp.size())});
    const std::string path = ::testing::TempDir() + fmt::format("/writer_{}.dfckpt", n);
    ASSERT_TRUE(writer.Save(vars, path).ok());
    auto loaded = LoadCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ASSERT_EQ(loaded->size(), 4u);
    EXPECT_EQ(loaded->at("w").ToVector<float>(), vars["w"].ToVector<float>());
    EXPECT_EQ(loaded->at("step").ToVector<int64_t>(), std::vector<int64_t>{int64_t{n}});
    EXPECT_EQ(loaded->at("ramp").ToVector<int32_t>(), ramp);
    EXPECT_EQ(loaded->at("empty").shape(), Shape({0, 3}));
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes, EncodeCheckpoint(vars)) << n;
    std::filesystem::remove(path);
  }
}

TEST(CheckpointFileTest, SessionsSaveAndRestoreVariablesByName) {
  Model m;
  std::string path = ::testing::TempDir() + "/model.dfckpt";
  auto a = Make(m.root);
  Status early = a->SaveCheckpoint(path);
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(early, {"'w'", "uninitialised"}));
  ASSERT_TRUE(a->Run({}, {}, {m.init}).ok());
  Status bumped = a->Run({}, {}, {m.bump}).status();
  ASSERT_TRUE(bumped.ok()) << bumped.ToString();
  std::vector<float> saved = Read(*a);
  ASSERT_TRUE(a->SaveCheckpoint(path).ok());
  ASSERT_TRUE(a->Run({}, {}, {m.bump}).ok());  // moves on after saving

  // A fresh session, and one on two devices, restore the saved values.
  for (int devices : {1, 2}) {
    SessionOptions options;
    if (devices == 2) options.devices = {"cpu:0", "cpu:1"};
    auto b = Make(m.root, options);
    ASSERT_TRUE(b->RestoreCheckpoint(path).ok());
    EXPECT_EQ(Read(*b), saved);
    ASSERT_TRUE(b->Run({}, {}, {m.bump}).ok());
    EXPECT_EQ(Read(*b)[0], saved[0] + 1.0f);
  }

  // Errors name the variable and the file, and change nothing.
  std::map<std::string, Tensor> wrong = {{"w", Tensor(DType::kF32, Shape{3, 2})}};
  std::string wrong_path = ::testing::TempDir() + "/wrong.dfckpt";
  ASSERT_TRUE(SaveCheckpoint(wrong, wrong_path).ok());
  auto c = Make(m.root);
  ASSERT_TRUE(c->Run({}, {}, {m.init}).ok());
  std::vector<float> before = Read(*c);
  Status shape = c->RestoreCheckpoint(wrong_path);
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(shape, {"'w'", "wrong.dfckpt", "[3,2]", "[2,2]"})) << shape.ToString();
  EXPECT_EQ(Read(*c), before);
  std::map<std::string, Tensor> other = {{"v", Tensor(DType::kF32, Shape{2, 2})}};
  std::string other_path = ::testing::TempDir() + "/other.dfckpt";
  ASSERT_TRUE(SaveCheckpoint(other, other_path).ok());
  Status absent = c->RestoreCheckpoint(other_path);
  EXPECT_EQ(absent.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(absent, {"'w'", "other.dfckpt"}));
  EXPECT_EQ(Read(*c), before);
}

// Issue 31: a checkpoint restored into a graph without variables "succeeded", restoring nothing.
// Refused on one device and on several, naming the file and what it holds.
TEST(CheckpointFileTest, ACheckpointSharingNoVariableIsRefused) {
  std::map<std::string, Tensor> vars = {{"w", Tensor::FromVector<float>({1, 2}, Shape{2})},
                                        {"b", Tensor::FromVector<float>({3}, Shape{1})}};
  const std::string path = ::testing::TempDir() + "/unrelated.dfckpt";
  ASSERT_TRUE(SaveCheckpoint(vars, path).ok());
  Scope root = Scope::NewRootScope();
  ops::Add(root.WithOpName("y"), ops::Const(root, 1.0f), ops::Const(root, 2.0f));
  for (int devices : {1, 2}) {
    SessionOptions options;
    if (devices == 2) options.devices = {"cpu:0", "cpu:1"};
    auto session = Make(root, options);
    Status s = session->RestoreCheckpoint(path);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_TRUE(MessageHas(s, {"unrelated.dfckpt", "shares no variable", "holds 2", "'b'", "'w'"}))
        << s.ToString();
  }
  // An empty checkpoint into such a graph restores nothing and is fine.
  const std::string empty = ::testing::TempDir() + "/empty.dfckpt";
  ASSERT_TRUE(SaveCheckpoint({}, empty).ok());
  EXPECT_TRUE(Make(root)->RestoreCheckpoint(empty).ok());
}

}  // namespace
}  // namespace dflow::serialization
