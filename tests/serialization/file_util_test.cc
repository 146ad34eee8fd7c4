// Atomic whole-file writes: through a fresh temporary file, and through a scratch file whose
// old contents (longer or shorter) are overwritten in place.
#include "serialization/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace dflow::serialization {
namespace {

using testing::MessageHas;

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/file_util_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(FileUtilTest, WritesPiecesAtomically) {
  const std::string dir = FreshDir("atomic");
  const std::string path = dir + "/f.bin";
  const std::vector<std::string_view> pieces = {"head-", "", "body-", "tail"};
  ASSERT_TRUE(WriteFileAtomically(path, pieces).ok());
  EXPECT_EQ(*ReadFile(path), "head-body-tail");
  ASSERT_TRUE(WriteFileAtomically(path, "short").ok());  // replaces, never appends
  EXPECT_EQ(*ReadFile(path), "short");
  // Nothing but the file is left in the directory.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(FileUtilTest, AScratchFileIsOverwrittenInPlaceAndRenamed) {
  const std::string dir = FreshDir("scratch");
  const std::string scratch = dir + "/.scratch", a = dir + "/a", b = dir + "/b";
  // No scratch file yet: one is made.
  const std::string first(10000, 'x');
  const std::vector<std::string_view> one = {first};
  ASSERT_TRUE(WriteFileThrough(scratch, a, one).ok());
  EXPECT_EQ(*ReadFile(a), first);
  EXPECT_FALSE(std::filesystem::exists(scratch));
  // The old file becomes the scratch of the next write, which is shorter: its tail is cut.
  std::filesystem::rename(a, scratch);
  const ino_t reused = InodeOf(scratch);
  const std::vector<std::string_view> two = {"new ", "bytes"};
  ASSERT_TRUE(WriteFileThrough(scratch, b, two).ok());
  EXPECT_EQ(*ReadFile(b), "new bytes");
  EXPECT_EQ(InodeOf(b), reused);  // the same file, not a copy
  EXPECT_FALSE(std::filesystem::exists(scratch));
  // And a longer one grows it.
  std::filesystem::rename(b, scratch);
  const std::string longer(20000, 'y');
  const std::vector<std::string_view> three = {longer, "!"};
  ASSERT_TRUE(WriteFileThrough(scratch, a, three).ok());
  EXPECT_EQ(*ReadFile(a), longer + "!");
}

TEST(FileUtilTest, AFailedWriteLeavesTheTargetAndNamesTheFile) {
  const std::string dir = FreshDir("fail");
  const std::string path = dir + "/kept";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  // The scratch file's directory does not exist.
  const std::vector<std::string_view> bytes = {"new"};
  Status s = WriteFileThrough(dir + "/missing/.scratch", path, bytes);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(s, {dir + "/missing/.scratch", "does not exist"})) << s.ToString();
  // The target is a directory: refused before anything is written, naming it.
  std::filesystem::create_directories(dir + "/adir/inner");
  s = WriteFileThrough(dir + "/.scratch", dir + "/adir", bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(s, {dir + "/adir", "is a folder"})) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + "/.scratch"));
  EXPECT_EQ(*ReadFile(path), "old");
}

// Issue 31: a missing folder was found only after all the steps, as Internal naming a temporary
// file. CheckWritable finds each case up front and names the path and the folder; the atomic
// writer says the same, naming the file asked for.
TEST(FileUtilTest, CheckWritableNamesThePathAndTheFolder) {
  const std::string dir = FreshDir("writable");
  EXPECT_TRUE(CheckWritable(dir + "/out.ckpt").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.ckpt"));  // nothing written
  EXPECT_TRUE(CheckWritable("relative_in_cwd.npy").ok());

  Status missing = CheckWritable(dir + "/no/such/out.ckpt");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      MessageHas(missing, {dir + "/no/such/out.ckpt", "'" + dir + "/no/such'", "does not exist"}))
      << missing.ToString();

  std::filesystem::create_directories(dir + "/adir");
  Status folder = CheckWritable(dir + "/adir");
  EXPECT_EQ(folder.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(folder, {dir + "/adir", "is a folder"})) << folder.ToString();

  ASSERT_TRUE(WriteFileAtomically(dir + "/afile", "x").ok());
  Status under_file = CheckWritable(dir + "/afile/out.ckpt");
  EXPECT_EQ(under_file.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(under_file, {dir + "/afile/out.ckpt", "not a folder"}))
      << under_file.ToString();

  EXPECT_EQ(CheckWritable("").code(), StatusCode::kInvalidArgument);

  Status write = WriteFileAtomically(dir + "/gone/out.ckpt", "bytes");
  EXPECT_EQ(write.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(write, {dir + "/gone/out.ckpt", "does not exist"})) << write.ToString();
  EXPECT_EQ(write.message().find(".tmp"), std::string::npos) << write.ToString();
}

}  // namespace
}  // namespace dflow::serialization
