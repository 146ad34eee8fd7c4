// Gather, GatherElements and ScatterElements: a hand-worked example each (the conformance
// table checks them on random inputs), the shape errors at graph construction and the run-time
// errors of indices out of range, each naming the node.
#include "ops/index_ops.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RunScope;

TEST(IndexOpsTest, HandWorkedExamples) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  // Rows 2, 0 and -1 (the last).
  auto rows = ops::Gather(root, x, ops::Const(root, std::vector<int64_t>{2, 0, -1}, Shape{3}), 0);
  // Per row, the column given: [[x00, x01], [x11, x10]] picks.
  auto picks = ops::GatherElements(
      root, x, ops::Const(root, std::vector<int32_t>{1, 0, 0, 0, 1, 1}, Shape{3, 2}), 1);
  auto scattered =
      ops::ScatterElements(root, x, ops::Const(root, std::vector<int64_t>{0, 0, 2}, Shape{3, 1}),
                           ops::Const(root, std::vector<float>{10, 20, 30}, Shape{3, 1}), 0, "add");
  auto out = RunScope(root, {}, {rows, picks, scattered});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape(), Shape({3, 2}));
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{5, 6, 1, 2, 5, 6}));
  EXPECT_EQ(out[1].ToVector<float>(), (std::vector<float>{2, 1, 3, 3, 6, 6}));
  // Row 0 column 0 gets 10 + 20; row 2 column 0 gets 30.
  EXPECT_EQ(out[2].ToVector<float>(), (std::vector<float>{31, 2, 3, 4, 35, 6}));
}

TEST(IndexOpsTest, ShapeErrorsNameTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  ops::GatherElements(root.WithOpName("rank"), x,
                      ops::Const(root, std::vector<int64_t>{0, 1}, Shape{2}), 0);
  EXPECT_TRUE(MessageHas(root.status(), {"'rank'", "must have the rank of the input"}))
      << root.status().ToString();
  Scope axis = Scope::NewRootScope();
  ops::Gather(axis.WithOpName("far"), ops::Const(axis, std::vector<float>{1, 2}, Shape{2}),
              ops::Const(axis, std::vector<int64_t>{0}, Shape{1}), 1);
  EXPECT_TRUE(MessageHas(axis.status(), {"'far'", "axis 1 is out of range"}))
      << axis.status().ToString();
  Scope red = Scope::NewRootScope();
  auto y = ops::Const(red, std::vector<float>{1, 2}, Shape{2});
  auto i = ops::Const(red, std::vector<int64_t>{0}, Shape{1});
  ops::ScatterElements(red.WithOpName("max"), y, i,
                       ops::Const(red, std::vector<float>{1}, Shape{1}), 0, "max");
  EXPECT_TRUE(MessageHas(red.status(), {"'max'", "reduction 'max'"})) << red.status().ToString();
}

TEST(IndexOpsTest, IndicesOutOfRangeFailTheRunNamingTheNode) {
  for (const char* op : {"Gather", "GatherElements", "ScatterElements"}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Const(root, std::vector<float>{1, 2, 3}, Shape{3});
    auto idx = ops::Placeholder(root.WithOpName("idx"), DType::kI64, Shape{2});
    Scope named = root.WithOpName("pick");
    Output y = std::string(op) == "Gather" ? ops::Gather(named, x, idx)
               : std::string(op) == "GatherElements"
                   ? ops::GatherElements(named, x, idx)
                   : ops::ScatterElements(named, x, idx,
                                          ops::Const(root, std::vector<float>{7, 8}, Shape{2}));
    auto session = Session::Create(root);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    for (int64_t bad : {3, -4}) {
      auto r =
          (*session)->Run({{"idx", Tensor::FromVector<int64_t>({0, bad}, Shape{2})}}, {y.name()});
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << op;
      EXPECT_TRUE(
          MessageHas(r.status(), {"'pick'", fmt::format("index {}", bad), "out of range [-3, 3)"}))
          << op << ": " << r.status().ToString();
    }
  }
}

}  // namespace
}  // namespace dflow
