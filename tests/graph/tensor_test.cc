#include "graph/tensor.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dflow
