#include "graph/tensor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <limits>

namespace dflow {
namespace {

TEST(TensorTest, AllocatesAlignedAndKnowsItsDevice) {
  Tensor t(DType::kF32, Shape{3, 5});
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.num_elements(), 15);
  EXPECT_EQ(t.num_bytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kCpuAlignment, 0u);
  EXPECT_EQ(t.device(), "/job:localhost/task:0/device:CPU:0");
}

TEST(TensorTest, CopiesShareTheBufferAndFreeItLast) {
  auto owner = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:7");
  CpuAllocator& alloc = *owner;
  {
    auto t = Tensor::Allocate(&alloc, DType::kF64, Shape{100});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(alloc.bytes_in_use(), 800u);
    Tensor copy = *t;
    EXPECT_TRUE(copy.SharesBufferWith(*t));
    EXPECT_FALSE(copy.buffer_unique());
    EXPECT_EQ(copy.device(), "/job:localhost/task:0/device:CPU:7");
    Tensor r = copy.Reshaped(Shape{10, 10});
    EXPECT_TRUE(r.SharesBufferWith(*t));
    EXPECT_EQ(r.shape(), Shape({10, 10}));
  }
  EXPECT_EQ(alloc.bytes_in_use(), 0u);
  EXPECT_EQ(alloc.peak_bytes(), 800u);
}

TEST(TensorTest, FromVectorCloneAndDebugString) {
  Tensor t = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.ToVector<int32_t>(), std::vector<int32_t>({1, 2, 3, 4, 5, 6}));
  Tensor c = t.Clone();
  EXPECT_FALSE(c.SharesBufferWith(t));
  EXPECT_TRUE(c.BitwiseEquals(t));
  c.data<int32_t>()[0] = 9;
  EXPECT_FALSE(c.BitwiseEquals(t));
  EXPECT_EQ(t.DebugString(), "i32[2,3] {1, 2, 3, 4, 5, 6}");
  EXPECT_EQ(t.DebugString(4), "i32[2,3] {1, 2, ..., 5, 6}");
  EXPECT_EQ(Tensor().DebugString(), "<empty>");
  EXPECT_EQ(Tensor::Scalar<bool>(true).DebugString(), "bool[] {true}");
}

TEST(TensorTest, KnownBoundIsAFactAboutTheValue) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_FALSE(t.known_finite());  // unless a kernel says so
  EXPECT_EQ(t.known_bound(), kInf);
  t.set_known_bound(6);
  EXPECT_TRUE(t.known_finite());
  Tensor copy = t;
  Tensor assigned;
  assigned = t;
  Tensor moved = std::move(copy);
  Tensor move_assigned;
  move_assigned = std::move(assigned);
  for (const Tensor& same :
       {moved, move_assigned, t.Reshaped(Shape{6}), t.Part(2, Shape{3}), t.Clone()}) {
    EXPECT_EQ(same.known_bound(), 6.f) << same.DebugString();
  }
  t.clear_known_bound();
  EXPECT_EQ(moved.known_bound(), 6.f);  // each tensor holds its own bound
  EXPECT_FALSE(t.Reshaped(Shape{3, 2}).known_finite());
  EXPECT_FALSE(Tensor(DType::kF32, Shape{2}).known_finite());
  // A bound of 0 is one (all zeros); NaN and negative ones mean nothing is known.
  t.set_known_bound(0);
  EXPECT_TRUE(t.known_finite());
  t.set_known_bound(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(t.known_bound(), kInf);
  t.set_known_bound(-1);
  EXPECT_EQ(t.known_bound(), kInf);
  t.set_known_bound(kInf);
  EXPECT_FALSE(t.known_finite());
}

TEST(TensorTest, TensorsOutliveTheirAllocatorsOwner) {
  // A tensor keeps its allocator alive after the device that owned it is gone (ASan checks).
  auto owner = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:3");
  auto t = Tensor::Allocate(owner.get(), DType::kI32, Shape{8});
  ASSERT_TRUE(t.ok());
  owner.reset();
  EXPECT_EQ(t->device(), "/job:localhost/task:0/device:CPU:3");
  t->data<int32_t>()[7] = 1;
}

TEST(TensorTest, AllocateErrorsNameTheProblem) {
  auto owner = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:0");
  CpuAllocator& alloc = *owner;
  auto unknown = Tensor::Allocate(&alloc, DType::kF32, Shape{-1, 2});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("[?,2]"), std::string::npos);
  int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  auto oom = Tensor::Allocate(&alloc, DType::kF64, Shape{huge});
  EXPECT_EQ(oom.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(oom.status().message().find("CPU:0"), std::string::npos);
}

// A shareable allocator's large blocks are memfds: another mapping of the file (what a process
// of this host makes through /proc/PID/fd) sees the tensor's bytes; small blocks stay plain.
TEST(TensorTest, ShareableBlocksAreMemfdsOthersCanMap) {
  auto memory = MakeAllocator<CpuAllocator>("/job:localhost/task:0/device:CPU:0");
  memory->set_shareable(true);
  Tensor small = Tensor::Allocate(memory.get(), DType::kF32, Shape{16}).value();
  EXPECT_FALSE(memory->FindShared(small.raw_data()).has_value());
  const int64_t n = 1 << 16;
  Tensor x = Tensor::Allocate(memory.get(), DType::kF32, Shape{n}).value();
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto region = memory->FindShared(x.Part(100, Shape{10}).raw_data());
  ASSERT_TRUE(region.has_value());
  EXPECT_EQ(region->offset, 400u);
  EXPECT_EQ(region->file_size, static_cast<uint64_t>(n) * 4);
  const std::string path = fmt::format("/proc/{}/fd/{}", getpid(), region->fd);
  int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  void* p = mmap(nullptr, region->file_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  const float* mapped = static_cast<const float*>(p);
  EXPECT_EQ(mapped[100], 100.0f);
  x.data<float>()[100] = -1.0f;
  EXPECT_EQ(mapped[100], -1.0f) << "the same memory, not a copy";
  munmap(p, region->file_size);
  EXPECT_EQ(memory->shared_blocks(), 1u);

  // Freed, a block is cached and handed out again; retired, it goes back to the system.
  void* first = x.raw_data();
  x = Tensor();
  Tensor again = Tensor::Allocate(memory.get(), DType::kF32, Shape{n}).value();
  EXPECT_EQ(again.raw_data(), first);
  memory->Retire(again.Part(5, Shape{5}).raw_data());
  again = Tensor();
  EXPECT_EQ(memory->shared_blocks(), 0u);
  EXPECT_EQ(memory->cached_bytes(), 0u) << "a retired block is not cached";
}

// A borrowed tensor is never written in place, not even by its only holder, and gives its
// memory back to its owner when the last reference goes.
TEST(TensorTest, BorrowedTensorsAreReadOnlyAndReturnedToTheirOwner) {
  class Owner final : public Allocator {
   public:
    void* Allocate(size_t, size_t) override { return nullptr; }
    void Deallocate(void* p, size_t bytes) override {
      freed = p;
      freed_bytes = bytes;
    }
    const std::string& device() const override { return name; }
    void* freed = nullptr;
    size_t freed_bytes = 0;
    std::string name = "/job:worker/task:1/device:CPU:0";
  };
  auto owner = MakeAllocator<Owner>();
  std::vector<float> memory = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::Borrow(owner.get(), memory.data(), DType::kF32, Shape{2, 3});
    EXPECT_EQ(t.data<float>()[4], 5.0f);
    EXPECT_TRUE(t.buffer_read_only());
    EXPECT_FALSE(t.buffer_unique()) << "a kernel would overwrite the owner's memory";
    EXPECT_EQ(t.device(), "/job:worker/task:1/device:CPU:0");
    Tensor view = t.Part(3, Shape{3});
    EXPECT_TRUE(view.buffer_read_only());
    t = Tensor();
    EXPECT_EQ(owner->freed, nullptr) << "the view still holds it";
  }
  EXPECT_EQ(owner->freed, memory.data());
  EXPECT_EQ(owner->freed_bytes, 24u);
}

}  // namespace
}  // namespace dflow
