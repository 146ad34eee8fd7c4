// Transpose, Concat, Split, Slice, Pad, OneHot, CheckNumerics, ReduceMax and ArgMax: results
// against loops written here, shape errors, and run-time errors naming the node. Their gradients
// are in gradient_check_test.cc.
#include "ops/manip_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RunScope;

// Values 0, 1, 2, ... in a tensor of `shape`.
Tensor Iota(const Shape& shape) {
  std::vector<float> v(shape.num_elements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::FromVector<float>(v, shape);
}

TEST(ManipOpsTest, TransposeSlicePad) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, Iota(Shape{2, 3, 4}));
  auto t = ops::Transpose(root, x, {2, 0, 1});
  auto s = ops::Slice(root, x, {1, 1, 0}, {1, -1, 3});
  auto p = ops::Pad(root, ops::Const(root, Iota(Shape{2, 2})), {1, 0, 0, 2}, -1);
  EXPECT_EQ(t.shape(), Shape({4, 2, 3}));
  EXPECT_EQ(s.shape(), Shape({1, 2, 3}));
  EXPECT_EQ(p.shape(), Shape({3, 4}));
  auto out = RunScope(root, {}, {t, s, p});
  ASSERT_EQ(out.size(), 3u);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(out[0].data<float>()[(a * 2 + b) * 3 + c], float((b * 3 + c) * 4 + a));
      }
  std::vector<float> want_slice;
  for (int j = 1; j < 3; ++j)
    for (int k = 0; k < 3; ++k) want_slice.push_back(float((1 * 3 + j) * 4 + k));
  EXPECT_EQ(out[1].ToVector<float>(), want_slice);
  EXPECT_EQ(out[2].ToVector<float>(),
            std::vector<float>({-1, -1, -1, -1, 0, 1, -1, -1, 2, 3, -1, -1}));
}

TEST(ManipOpsTest, ConcatAlongEachAxis) {
  for (int64_t axis : {0, 1, -1}) {
    Scope root = Scope::NewRootScope();
    Shape sa = axis == 0 ? Shape{1, 3} : Shape{2, 1}, sb = axis == 0 ? Shape{2, 3} : Shape{2, 2};
    auto y = ops::Concat(root, {ops::Const(root, Iota(sa)), ops::Const(root, Iota(sb))}, axis);
    auto out = RunScope(root, {}, {y});
    ASSERT_EQ(out.size(), 1u);
    if (axis == 0) {
      EXPECT_EQ(out[0].shape(), Shape({3, 3}));
      EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({0, 1, 2, 0, 1, 2, 3, 4, 5}));
    } else {
      EXPECT_EQ(out[0].shape(), Shape({2, 3}));
      EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({0, 0, 1, 1, 2, 3}));
    }
  }
}

TEST(ManipOpsTest, SplitEquallyAndBySizes) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, Iota(Shape{2, 6, 2}));
  auto eq = ops::Split(root, x, 3, 1);
  auto by = ops::SplitV(root, x, {1, -1, 0}, -2);
  auto rows = ops::Split(root, x, 2, 0);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  ASSERT_EQ(eq.size(), 3u);
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(eq[1].shape(), Shape({2, 2, 2}));
  EXPECT_EQ(by[1].shape(), Shape({2, 5, 2}));
  EXPECT_EQ(by[2].shape(), Shape({2, 0, 2}));
  auto out = RunScope(root, {}, {eq[0], eq[1], eq[2], by[0], by[1], by[2], rows[1]});
  ASSERT_EQ(out.size(), 7u);
  // Piece p along axis 1 holds x[b, start + j, k] = (b * 6 + start + j) * 2 + k.
  auto piece = [](int64_t start, int64_t len) {
    std::vector<float> v;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < len; ++j)
        for (int64_t k = 0; k < 2; ++k) v.push_back(float((b * 6 + start + j) * 2 + k));
    return v;
  };
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].ToVector<float>(), piece(2 * i, 2)) << i;
  EXPECT_EQ(out[3].ToVector<float>(), piece(0, 1));
  EXPECT_EQ(out[4].ToVector<float>(), piece(1, 5));
  EXPECT_EQ(out[5].num_elements(), 0);
  std::vector<float> second;
  for (int i = 12; i < 24; ++i) second.push_back(float(i));
  EXPECT_EQ(out[6].ToVector<float>(), second);
}

// A split along the first dimension hands out views of the input (no copy); element-wise ops
// that could run in place on a piece (its last reader) must still leave the input and the
// other pieces as they were.
TEST(ManipOpsTest, RowPiecesAreViewsThatInPlaceOpsDoNotWriteThrough) {
  Tensor x = Iota(Shape{6, 4});
  Tensor expect_x = x.Clone();
  Tensor part = x.Part(8, Shape{2, 4});
  EXPECT_TRUE(part.SharesBufferWith(x));
  EXPECT_EQ(part.raw_data(), static_cast<char*>(x.raw_data()) + 8 * sizeof(float));
  EXPECT_EQ(part.ToVector<float>(), std::vector<float>({8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(x.buffer_refs(), 2);

  Scope root = Scope::NewRootScope();
  auto in = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{6, 4});
  auto rows = ops::Split(root, in, 3, 0);
  // Each piece's only reader is an element-wise op: each runs on a view whose buffer others
  // hold, so it must write elsewhere.
  auto a = ops::Add(root, rows[0], ops::Const(root, 100.0f));
  auto b = ops::Neg(root, rows[1]);
  auto c = ops::Mul(root, rows[2], rows[2]);
  auto whole = ops::Identity(root, in);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int run = 0; run < 2; ++run) {  // the second from a memory plan
    auto out = (*session)->Run({{"x", x}}, {a.name(), b.name(), c.name(), whole.name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ((*out)[0].data<float>()[i], i + 100.0f);
      EXPECT_EQ((*out)[1].data<float>()[i], -(i + 8.0f));
      EXPECT_EQ((*out)[2].data<float>()[i], (i + 16.0f) * (i + 16.0f));
    }
    EXPECT_TRUE((*out)[3].BitwiseEquals(expect_x)) << (*out)[3].DebugString();
    EXPECT_TRUE(x.BitwiseEquals(expect_x)) << x.DebugString();
  }
}

TEST(ManipOpsTest, WriteRowsThatDoNotFitAreErrorsNamingTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, Iota(Shape{4, 2}));
  ops::WriteRows(root.WithOpName("past_the_end"), x, ops::Const(root, Iota(Shape{2, 2})), 3);
  EXPECT_TRUE(MessageHas(root.status(), {"past_the_end", "rows [3, 5)", "outside the 4 rows"}))
      << root.status().ToString();
  Scope wide = Scope::NewRootScope();
  ops::WriteRows(wide.WithOpName("wide"), ops::Const(wide, Iota(Shape{4, 2})),
                 ops::Const(wide, Iota(Shape{1, 3})), 0);
  EXPECT_TRUE(MessageHas(wide.status(), {"wide", "dimension 1 differs"}))
      << wide.status().ToString();
  // Rows known only at run time.
  Scope late = Scope::NewRootScope();
  auto some = ops::Placeholder(late.WithOpName("x"), DType::kF32, Shape{-1, 2});
  auto w = ops::WriteRows(late.WithOpName("late"), some, ops::Const(late, Iota(Shape{3, 2})), 0);
  auto session = Session::Create(late);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto r = (*session)->Run({{"x", Iota(Shape{2, 2})}}, {w.name()});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(r.status(), {"'late'", "cannot go into", "at row 0"}))
      << r.status().ToString();
}

// The all-reduce's assembly op (_WriteRowsSum, internal): a chain from an Empty fills rows with
// sums, scaled or not, and copies; each step writes into the same buffer although the views of
// rows already written (what the all-reduce sends on) are alive.
TEST(ManipOpsTest, WriteRowsSumFillsRowsInPlaceWhileTheirViewsLive) {
  Scope root = Scope::NewRootScope();
  auto step = [&](const std::string& name, Output x, std::vector<Output> ys, int64_t offset,
                  double scale) {
    std::vector<Output> inputs = {x};
    inputs.insert(inputs.end(), ys.begin(), ys.end());
    int id = root.WithOpName(name).AddNode("_WriteRowsSum", inputs,
                                           {{"offset", offset}, {"scale", scale}});
    return std::pair{root.OutputOf(id, 0), root.OutputOf(id, 1)};
  };
  std::vector<float> a = {1, 2, 3, 4}, b = {10, 20, 30, 40}, c = {-1, -2, -3, -4};
  auto ca = ops::Const(root, a, Shape{2, 2}), cb = ops::Const(root, b, Shape{2, 2});
  auto cc = ops::Const(root, c, Shape{2, 2});
  auto empty = ops::Empty(root, Shape{6, 2}, DType::kF32);
  auto [z1, rows1] = step("mean", empty, {ca, cb}, 0, 0.5);
  auto [z2, rows2] = step("copy", z1, {cc}, 4, 1.0);
  auto [z3, rows3] = step("sum3", z2, {ca, cb, cc}, 2, 1.0);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(rows3.shape(), Shape({2, 2}));
  auto out = RunScope(root, {}, {z3, rows1, rows2});
  ASSERT_EQ(out.size(), 3u);
  std::vector<float> want;
  for (int i = 0; i < 4; ++i) want.push_back((a[i] + b[i]) * 0.5f);
  for (int i = 0; i < 4; ++i) want.push_back(a[i] + b[i] + c[i]);
  for (int i = 0; i < 4; ++i) want.push_back(c[i]);
  EXPECT_EQ(out[0].ToVector<float>(), want);
  EXPECT_EQ(out[1].ToVector<float>(), std::vector<float>(want.begin(), want.begin() + 4));
  EXPECT_EQ(out[2].ToVector<float>(), c);
  // One buffer all along: no step copied the rows before it although their views were held.
  EXPECT_TRUE(out[0].SharesBufferWith(out[1]));
  EXPECT_TRUE(out[0].SharesBufferWith(out[2]));

  // Integers sum exactly; a scale needs floating point.
  Scope ints = Scope::NewRootScope();
  auto i0 = ops::Const(ints, std::vector<int32_t>{1 << 30, 7}, Shape{2});
  auto i1 = ops::Const(ints, std::vector<int32_t>{-(1 << 30), 8}, Shape{2});
  int sum = ints.WithOpName("isum").AddNode("_WriteRowsSum",
                                            {ops::Empty(ints, Shape{4}, DType::kI32), i0, i1},
                                            {{"offset", int64_t{2}}, {"scale", 1.0}});
  int scaled = ints.WithOpName("iscaled").AddNode("_WriteRowsSum",
                                                  {ops::Empty(ints, Shape{2}, DType::kI32), i0, i1},
                                                  {{"offset", int64_t{0}}, {"scale", 0.5}});
  auto session = Session::Create(ints);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto r = (*session)->Run({}, {ints.OutputOf(sum, 1).name()});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].ToVector<int32_t>(), (std::vector<int32_t>{0, 15}));
  auto bad = (*session)->Run({}, {ints.OutputOf(scaled, 0).name()});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"'iscaled'", "scale of 0.5", "f32 or f64"}))
      << bad.status().ToString();

  // Rows that do not fit, and ys that disagree, are refused naming the node.
  Scope fit = Scope::NewRootScope();
  fit.WithOpName("past_the_end")
      .AddNode("_WriteRowsSum",
               {ops::Empty(fit, Shape{3, 2}, DType::kF32), ops::Const(fit, a, Shape{2, 2})},
               {{"offset", int64_t{2}}, {"scale", 1.0}});
  EXPECT_TRUE(MessageHas(fit.status(), {"past_the_end", "rows [2, 4)", "outside the 3 rows"}))
      << fit.status().ToString();
  Scope differ = Scope::NewRootScope();
  differ.WithOpName("differ").AddNode(
      "_WriteRowsSum",
      {ops::Empty(differ, Shape{3, 2}, DType::kF32), ops::Const(differ, a, Shape{2, 2}),
       ops::Const(differ, std::vector<float>{1, 2}, Shape{1, 2})},
      {{"offset", int64_t{0}}, {"scale", 1.0}});
  EXPECT_TRUE(MessageHas(differ.status(), {"differ", "input 2 has shape [1,2]"}))
      << differ.status().ToString();
}

TEST(ManipOpsTest, SplitRunTimeErrorNamesTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2});
  auto parts = ops::Split(root.WithOpName("split"), x, 2, 0);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto r = (*session)->Run({{"x", Iota(Shape{3, 2})}}, {parts[0].name()});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(r.status(), {"'split'", "size 3", "2 equal pieces"}));
}

TEST(ManipOpsTest, OneHotArgMaxReduceMax) {
  Scope root = Scope::NewRootScope();
  auto oh = ops::OneHot(root, ops::Const(root, std::vector<int32_t>{2, 0, 5, -1}, Shape{4}), 3);
  std::vector<float> v = {3, 7, 7, 1, -2, 9, 0, 4, 4, 8, 8, -1};
  auto x = ops::Const(root, v, Shape{3, 4});
  auto am0 = ops::ArgMax(root, x, 0), am1 = ops::ArgMax(root, x, -1);
  auto mx = ops::ReduceMax(root, x, {1});
  auto mx_all = ops::ReduceMax(root, x, {}, {.keep_dims = true});
  auto out = RunScope(root, {}, {oh, am0, am1, mx, mx_all});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(out[1].ToVector<int64_t>(), std::vector<int64_t>({2, 1, 2, 1}));
  EXPECT_EQ(out[2].ToVector<int64_t>(), std::vector<int64_t>({1, 1, 1}));  // first on ties
  EXPECT_EQ(out[3].ToVector<float>(), std::vector<float>({7, 9, 8}));
  EXPECT_EQ(out[4].shape(), Shape({1, 1}));
  EXPECT_EQ(out[4].ToVector<float>(), std::vector<float>({9}));
}

TEST(ManipOpsTest, CheckNumericsNamesNodeMessageAndIndex) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{3});
  auto y = ops::CheckNumerics(root.WithOpName("guard"), ops::Log(root, x), "log of inputs");
  auto s = Session::Create(root);
  ASSERT_TRUE(s.ok());
  auto good = (*s)->Run({{"x", Tensor::FromVector<float>({1, 2, 3}, Shape{3})}}, {y.name()});
  ASSERT_TRUE(good.ok());
  // f32 Log runs on oneDNN's eltwise primitive, accurate to about 2e-6 relative here.
  EXPECT_NEAR(good->at(0).data<float>()[1], std::log(2.0f), 1e-5);
  auto bad = (*s)->Run({{"x", Tensor::FromVector<float>({1, -2, 3}, Shape{3})}}, {y.name()});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(
      bad.status(), {"node 'guard' (CheckNumerics)", "log of inputs", "found NaN at index 1"}));
}

TEST(ManipOpsTest, ShapeErrorsNameTheNode) {
  struct Case {
    std::function<void(const Scope&)> build;
    std::string why;
  };
  std::vector<Case> cases = {
      {[](const Scope& s) {
         ops::Transpose(s.WithOpName("bad"), ops::Const(s, Iota(Shape{2, 3})), {0, 0});
       },
       "not a permutation"},
      {[](const Scope& s) {
         ops::Concat(s.WithOpName("bad"),
                     {ops::Const(s, Iota(Shape{2, 3})), ops::Const(s, Iota(Shape{3, 3}))}, 1);
       },
       "dimension 0 differs"},
      {[](const Scope& s) {
         ops::Slice(s.WithOpName("bad"), ops::Const(s, Iota(Shape{2, 3})), {1, 2}, {1, 2});
       },
       "outside its size 3"},
      {[](const Scope& s) {
         ops::Pad(s.WithOpName("bad"), ops::Const(s, Iota(Shape{2, 3})), {1, 1});
       },
       "paddings needs 4 entries"},
      {[](const Scope& s) { ops::Split(s.WithOpName("bad"), ops::Const(s, Iota(Shape{5})), 2, 0); },
       "does not split into 2 equal pieces"},
      {[](const Scope& s) {
         ops::SplitV(s.WithOpName("bad"), ops::Const(s, Iota(Shape{5})), {2, 2}, 0);
       },
       "do not add up"},
      {[](const Scope& s) {
         ops::SplitV(s.WithOpName("bad"), ops::Const(s, Iota(Shape{5})), {-1, -1}, 0);
       },
       "one -1"},
      {[](const Scope& s) { ops::Split(s.WithOpName("bad"), ops::Const(s, Iota(Shape{5})), 0, 0); },
       "number of outputs must be 1"},
      {[](const Scope& s) { ops::ArgMax(s.WithOpName("bad"), ops::Const(s, Iota(Shape{2})), 1); },
       "axis 1 is out of range"},
  };
  for (const auto& c : cases) {
    Scope root = Scope::NewRootScope();
    c.build(root);
    EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument) << c.why;
    EXPECT_TRUE(MessageHas(root.status(), {"node 'bad'", c.why}));
  }
}

}  // namespace
}  // namespace dflow
