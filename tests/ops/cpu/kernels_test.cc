// CPU kernels against plain-loop references computed here, on random inputs and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/array_ops.h"
#include "ops/broadcast.h"
#include "ops/conv_ops.h"
#include "ops/cpu/cpu_device.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RandomFloats;
using testing::RunScope;

// Index of `out_index` (row-major in `out`) in a broadcast input of shape `in`.
int64_t BroadcastIndex(const Shape& in, const Shape& out, int64_t out_index) {
  int64_t idx = 0, stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    int64_t coord = out_index % out[d];
    out_index /= out[d];
    int j = d - (out.rank() - in.rank());
    if (j >= 0) {
      if (in[j] != 1) idx += coord * stride;
      stride *= in[j];
    }
  }
  return idx;
}

template <typename T>
Tensor RandomTensor(const Shape& s, uint32_t seed) {
  auto f = RandomFloats(s.num_elements(), seed, -8, 8);
  std::vector<T> v(f.begin(), f.end());
  if constexpr (std::is_integral_v<T>) {
    for (auto& x : v) x = x == 0 ? 3 : x;  // keep divisors non-zero
  }
  return Tensor::FromVector<T>(v, s);
}

struct ShapePair {
  Shape a, b;
};
const std::vector<ShapePair> kBroadcastCases = {
    {Shape{5}, Shape{5}},
    {Shape{2, 3}, Shape{3}},
    {Shape{2, 3}, Shape{}},
    {Shape{}, Shape{4}},
    {Shape{4, 1, 5}, Shape{3, 1}},
    {Shape{1, 3}, Shape{2, 1}},
    {Shape{2, 1, 3, 1}, Shape{4, 1, 2}},
    {Shape{0, 3}, Shape{3}},
};

template <typename T>
void CheckBinary(const char* op_name, Output (*op)(const Scope&, Output, Output), T (*ref)(T, T)) {
  uint32_t seed = 1;
  for (const auto& c : kBroadcastCases) {
    Scope root = Scope::NewRootScope();
    Tensor ta = RandomTensor<T>(c.a, seed++), tb = RandomTensor<T>(c.b, seed++);
    auto y = op(root, ops::Const(root, ta), ops::Const(root, tb));
    auto out = RunScope(root, {}, {y});
    ASSERT_EQ(out.size(), 1u) << op_name;
    const Shape& s = out[0].shape();
    ASSERT_EQ(s, *BroadcastShape(c.a, c.b));
    for (int64_t i = 0; i < s.num_elements(); ++i) {
      T want =
          ref(ta.data<T>()[BroadcastIndex(c.a, s, i)], tb.data<T>()[BroadcastIndex(c.b, s, i)]);
      ASSERT_EQ(out[0].data<T>()[i], want) << op_name << " " << c.a << " " << c.b << " at " << i;
    }
  }
}

template <typename T>
void CheckAllBinary() {
  CheckBinary<T>("Add", ops::Add, [](T a, T b) { return T(a + b); });
  CheckBinary<T>("Sub", ops::Sub, [](T a, T b) { return T(a - b); });
  CheckBinary<T>("Mul", ops::Mul, [](T a, T b) { return T(a * b); });
  CheckBinary<T>("Div", ops::Div, [](T a, T b) { return T(a / b); });
  CheckBinary<T>("Maximum", ops::Maximum, [](T a, T b) { return a > b ? a : b; });
}

TEST(ElementwiseKernelTest, BinaryF32) { CheckAllBinary<float>(); }
TEST(ElementwiseKernelTest, BinaryF64) { CheckAllBinary<double>(); }
TEST(ElementwiseKernelTest, BinaryI32) { CheckAllBinary<int32_t>(); }
TEST(ElementwiseKernelTest, BinaryI64) { CheckAllBinary<int64_t>(); }

TEST(ElementwiseKernelTest, IntegerDivisionByZeroNamesNode) {
  Scope root = Scope::NewRootScope();
  auto y =
      ops::Div(root.WithOpName("ratio"), ops::Const(root, std::vector<int32_t>{4, 6}, Shape{2}),
               ops::Const(root, std::vector<int32_t>{2, 0}, Shape{2}));
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run({}, {y.name()});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), {"node 'ratio' (Div)", "CPU:0", "division by zero"}));
}

TEST(ElementwiseKernelTest, ReluAndBiasAdd) {
  Scope root = Scope::NewRootScope();
  Tensor x = Tensor::FromVector<float>(RandomFloats(24, 7), Shape{4, 6});
  Tensor b = Tensor::FromVector<float>(RandomFloats(6, 8), Shape{6});
  auto r = ops::Relu(root, ops::Const(root, x));
  auto ba = ops::BiasAdd(root, ops::Const(root, x), ops::Const(root, b));
  auto out = RunScope(root, {}, {r, ba});
  ASSERT_EQ(out.size(), 2u);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(out[0].data<float>()[i], std::max(0.0f, x.data<float>()[i]));
    EXPECT_EQ(out[1].data<float>()[i], x.data<float>()[i] + b.data<float>()[i % 6]);
  }
}

TEST(ElementwiseKernelTest, RunsInPlaceWhenLastReader) {
  // x (fed, held by the caller) -> Add -> Relu -> Mul: the Relu and Mul write into the Add's
  // buffer, since each is the only reader of its input.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1024});
  auto a = ops::Add(root, x, ops::Const(root, 1.0f));
  auto r = ops::Relu(root, a);
  auto m = ops::Mul(root, r, ops::Const(root, 2.0f));
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok());
  Tensor in = Tensor::FromVector<float>(RandomFloats(1024, 3), Shape{1024});
  Tensor keep = in.Clone();
  auto& alloc = *static_cast<CpuDevice&>((*session)->device()).cpu_allocator();
  auto out = (*session)->Run({{"x", in}}, {m.name()});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(in.BitwiseEquals(keep));  // the fed tensor is never overwritten
  for (int i = 0; i < 1024; ++i) {
    EXPECT_EQ(out->at(0).data<float>()[i], std::max(0.0f, keep.data<float>()[i] + 1) * 2);
  }
  // One intermediate buffer for the three ops: peak is one 4 KiB tensor.
  EXPECT_EQ(alloc.peak_bytes(), 4096u);
}

void CheckMatMul(int64_t m, int64_t k, int64_t n, bool ta, bool tb, uint32_t seed) {
  Scope root = Scope::NewRootScope();
  Shape sa = ta ? Shape{k, m} : Shape{m, k};
  Shape sb = tb ? Shape{n, k} : Shape{k, n};
  Tensor a = Tensor::FromVector<float>(RandomFloats(m * k, seed), sa);
  Tensor b = Tensor::FromVector<float>(RandomFloats(k * n, seed + 1), sb);
  auto y = ops::MatMul(root, ops::Const(root, a), ops::Const(root, b),
                       {.transpose_a = ta, .transpose_b = tb});
  auto out = RunScope(root, {}, {y});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), Shape({m, n}));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        float av = ta ? a.data<float>()[p * m + i] : a.data<float>()[i * k + p];
        float bv = tb ? b.data<float>()[j * k + p] : b.data<float>()[p * n + j];
        acc += static_cast<double>(av) * bv;
      }
      ASSERT_NEAR(out[0].data<float>()[i * n + j], acc, 1e-4 * (1 + std::abs(acc)))
          << m << "x" << k << "x" << n << " ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(MatMulKernelTest, MatchesTripleLoop) {
  uint32_t seed = 11;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CheckMatMul(1, 1, 1, ta, tb, seed++);
      CheckMatMul(7, 13, 5, ta, tb, seed++);
      CheckMatMul(64, 100, 33, ta, tb, seed++);
      CheckMatMul(3, 0, 4, ta, tb, seed++);
    }
  }
}

// _ScaledBatchMatMul bounds its output by the largest magnitude it wrote (so the Softmax reading
// an attention's scores needs no check), and bounds nothing when a NaN got in; a mask that does
// not broadcast to the product is refused naming both shapes.
TEST(MatMulKernelTest, AScaledProductBoundsWhatItWrote) {
  ops::RegisterStandardOps();
  for (bool with_nan : {false, true}) {
    std::vector<float> av = RandomFloats(2 * 3 * 4 * 5, 41, -3, 3);
    if (with_nan) av[7] = std::numeric_limits<float>::quiet_NaN();
    Scope root = Scope::NewRootScope();
    Output a = ops::Const(root, Tensor::FromVector(av, Shape{2, 3, 4, 5}));
    Output b =
        ops::Const(root, Tensor::FromVector(RandomFloats(2 * 3 * 5 * 6, 42), Shape{2, 3, 5, 6}));
    Output m = ops::Const(root, Tensor::FromVector(RandomFloats(2 * 6, 43), Shape{2, 1, 1, 6}));
    Output y = root.OutputOf(root.WithOpName("y").AddNode(
        "_ScaledBatchMatMul", {a, b, m},
        {{"transpose_a", false}, {"transpose_b", false}, {"alpha", 0.5}}));
    auto out = RunScope(root, {}, {y});
    ASSERT_EQ(out.size(), 1u);
    float most = 0;
    int nans = 0;
    for (float v : out[0].ToVector<float>()) {
      nans += std::isnan(v);
      most = std::max(most, std::fabs(v));
    }
    EXPECT_EQ(out[0].known_finite(), !with_nan);
    EXPECT_EQ(nans, with_nan ? 6 : 0);  // the NaN's row of one product
    if (!with_nan) {
      EXPECT_EQ(out[0].known_bound(), most);
    }
  }
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{-1, 3, 4, 5});
  auto mask = ops::Placeholder(root.WithOpName("mask"), DType::kF32, Shape{-1, 1, 1, 6});
  Output b = ops::Const(root, Tensor::FromVector(RandomFloats(3 * 5 * 6, 44), Shape{1, 3, 5, 6}));
  root.WithOpName("y").AddNode("_ScaledBatchMatMul", {a, b, mask},
                               {{"transpose_a", false}, {"transpose_b", false}, {"alpha", 1.0}});
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto bad =
      (*session)->Run({{"a", Tensor::FromVector(RandomFloats(60, 45), Shape{1, 3, 4, 5})},
                       {"mask", Tensor::FromVector(RandomFloats(12, 46), Shape{2, 1, 1, 6})}},
                      {"y"});
  EXPECT_TRUE(testing::MessageHas(bad.status(), {"addend [2,1,1,6]", "product [1,3,4,6]", "y"}))
      << bad.status().ToString();
}

TEST(MatMulKernelTest, BatchMatMulMatchesPerBatchLoops) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t batch = 3, m = 5, k = 7, n = 4;
      Shape sa = ta ? Shape{batch, k, m} : Shape{batch, m, k};
      Shape sb = tb ? Shape{batch, n, k} : Shape{batch, k, n};
      Tensor a = Tensor::FromVector<float>(RandomFloats(batch * m * k, 31), sa);
      Tensor b = Tensor::FromVector<float>(RandomFloats(batch * k * n, 32), sb);
      Scope root = Scope::NewRootScope();
      auto y = ops::BatchMatMul(root, ops::Const(root, a), ops::Const(root, b),
                                {.transpose_a = ta, .transpose_b = tb});
      auto out = RunScope(root, {}, {y});
      ASSERT_EQ(out.size(), 1u);
      ASSERT_EQ(out[0].shape(), Shape({batch, m, n}));
      for (int64_t q = 0; q < batch; ++q) {
        const float* pa = a.data<float>() + q * m * k;
        const float* pb = b.data<float>() + q * k * n;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              acc +=
                  double(ta ? pa[p * m + i] : pa[i * k + p]) * (tb ? pb[j * k + p] : pb[p * n + j]);
            }
            ASSERT_NEAR(out[0].data<float>()[(q * m + i) * n + j], acc, 1e-4 * (1 + std::abs(acc)));
          }
        }
      }
    }
  }
  Scope bad = Scope::NewRootScope();
  ops::BatchMatMul(bad.WithOpName("bmm"), ops::Placeholder(bad, DType::kF32, Shape{2, 3, 4}),
                   ops::Placeholder(bad, DType::kF32, Shape{3, 4, 5}));
  EXPECT_TRUE(MessageHas(bad.status(), {"node 'bmm' (BatchMatMul)", "batch dimension 0 differs"}));
}

TEST(MatMulKernelTest, RunTimeShapeMismatchNamesNode) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{-1, -1});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{-1, -1});
  auto y = ops::MatMul(root.WithOpName("mm"), a, b);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run(
      {{"a", Tensor(DType::kF32, Shape{2, 3})}, {"b", Tensor(DType::kF32, Shape{4, 2})}},
      {y.name()});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), {"node 'mm' (MatMul)", "inner dimensions differ"}));
}

template <typename T>
void CheckReduce(const Shape& s, std::vector<int64_t> axes, bool mean, bool keep) {
  Scope root = Scope::NewRootScope();
  Tensor x = RandomTensor<T>(s, 5);
  auto y = mean ? ops::ReduceMean(root, ops::Const(root, x), axes, {.keep_dims = keep})
                : ops::ReduceSum(root, ops::Const(root, x), axes, {.keep_dims = keep});
  auto out = RunScope(root, {}, {y});
  ASSERT_EQ(out.size(), 1u);
  std::vector<bool> reduced(s.rank(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + s.rank() : a] = true;
  // Reference: accumulate every input element into the output slot of its kept coordinates.
  std::vector<double> acc(out[0].num_elements(), 0.0);
  int64_t count = 1;
  for (int d = 0; d < s.rank(); ++d) count *= reduced[d] ? s[d] : 1;
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    int64_t rest = i, o = 0, stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      int64_t coord = rest % s[d];
      rest /= s[d];
      if (!reduced[d]) {
        o += coord * stride;
        stride *= s[d];
      }
    }
    acc[o] += static_cast<double>(x.data<T>()[i]);
  }
  for (size_t j = 0; j < acc.size(); ++j) {
    double want = mean ? acc[j] / count : acc[j];
    if constexpr (std::is_integral_v<T>) {
      EXPECT_EQ(out[0].data<T>()[j], static_cast<T>(mean ? static_cast<int64_t>(acc[j]) / count
                                                         : static_cast<int64_t>(acc[j])));
    } else {
      EXPECT_NEAR(out[0].data<T>()[j], want, 1e-4 * (1 + std::abs(want)));
    }
  }
}

TEST(ReduceKernelTest, MatchesLoopReference) {
  for (bool mean : {false, true}) {
    for (bool keep : {false, true}) {
      CheckReduce<float>(Shape{3, 4, 5}, {}, mean, keep);
      CheckReduce<float>(Shape{3, 4, 5}, {1}, mean, keep);
      CheckReduce<float>(Shape{3, 4, 5}, {0, 2}, mean, keep);
      CheckReduce<double>(Shape{2, 3, 4, 5}, {-1, 1}, mean, keep);
      CheckReduce<int32_t>(Shape{6, 7}, {0}, mean, keep);
      CheckReduce<int64_t>(Shape{6, 7}, {1}, mean, keep);
    }
  }
}

TEST(ReduceKernelTest, EmptyReductionsFollowNumPy) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, Tensor(DType::kF32, Shape{0, 3}));
  auto sum = ops::ReduceSum(root, x, {0});
  auto mean = ops::ReduceMean(root, x, {0});
  auto out = RunScope(root, {}, {sum, mean});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({0, 0, 0}));
  for (float v : out[1].ToVector<float>()) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace dflow

namespace dflow {
namespace {

// The 16 bits of each element of an f16 or bf16 tensor.
std::vector<uint16_t> Bits(const Tensor& t) {
  std::vector<uint16_t> out(t.num_elements());
  std::memcpy(out.data(), t.raw_data(), out.size() * 2);
  return out;
}

// f32 to f16 and bf16 and back on the CPU: known bit patterns (IEEE half: 0x3C00 is 1, 0x7BFF
// the largest finite 65504; bf16 is the top half of an f32, rounded to nearest even).
TEST(CastKernelTest, F16AndBf16RoundToNearestEvenAndComeBack) {
  Scope root = Scope::NewRootScope();
  auto bits_of = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<float> in = {1.0f,
                           -2.0f,
                           65504.0f,
                           1.0f / 3,
                           0.0f,
                           bits_of(0x3F808000),   // halfway: bf16 rounds to the even 0x3F80
                           bits_of(0x3F818000),   // halfway: to the even 0x3F82
                           bits_of(0x3F808001)};  // past halfway: up, 0x3F81
  auto x = ops::Const(root.WithOpName("x"), in, Shape{8});
  auto h = ops::Cast(root.WithOpName("h"), x, DType::kF16);
  auto b = ops::Cast(root.WithOpName("b"), x, DType::kBF16);
  auto h32 = ops::Cast(root.WithOpName("h32"), h, DType::kF32);
  auto b32 = ops::Cast(root.WithOpName("b32"), b, DType::kF32);
  auto hb = ops::Cast(root.WithOpName("hb"), h, DType::kBF16);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {h.name(), b.name(), h32.name(), b32.name(), hb.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).dtype(), DType::kF16);
  const std::vector<uint16_t> f16 = Bits(out->at(0)), bf16 = Bits(out->at(1));
  EXPECT_EQ(f16[0], 0x3C00);
  EXPECT_EQ(f16[1], 0xC000);
  EXPECT_EQ(f16[2], 0x7BFF);
  EXPECT_EQ(f16[3], 0x3555);  // 1/3 rounds down to 0.333251953125
  EXPECT_EQ(f16[4], 0x0000);
  EXPECT_EQ(bf16[0], 0x3F80);
  EXPECT_EQ(bf16[1], 0xC000);
  EXPECT_EQ(bf16[3], 0x3EAB);  // 0x3EAAAAAB rounds up
  EXPECT_EQ(bf16[5], 0x3F80);
  EXPECT_EQ(bf16[6], 0x3F82);
  EXPECT_EQ(bf16[7], 0x3F81);
  const float* back16 = out->at(2).data<float>();
  const float* back_b = out->at(3).data<float>();
  EXPECT_EQ(back16[3], 0.333251953125f);
  EXPECT_EQ(back16[2], 65504.0f);
  EXPECT_EQ(back_b[1], -2.0f);
  EXPECT_EQ(back_b[6], bits_of(0x3F820000));
  EXPECT_EQ(Bits(out->at(4))[0], 0x3F80);  // f16 1 is bf16 1
}

// f16's edges: the smallest subnormal 2^-24 (0x0001), the smallest normal 2^-14 (0x0400),
// halfway between 0 and 2^-24 rounds to the even 0, 65520 overflows to infinity, NaN stays NaN.
TEST(CastKernelTest, F16SubnormalsOverflowAndNan) {
  Scope root = Scope::NewRootScope();
  std::vector<float> in = {std::ldexp(1.0f, -24),
                           std::ldexp(1.0f, -14),
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -25),
                           65520.0f,
                           -65504.0f,
                           std::nanf(""),
                           std::ldexp(1.0f, -20) * 3};
  auto h = ops::Cast(root.WithOpName("h"), ops::Const(root, in, Shape{8}), DType::kF16);
  auto back = ops::Cast(root.WithOpName("back"), h, DType::kF32);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {h.name(), back.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<uint16_t> bits = Bits(out->at(0));
  EXPECT_EQ(bits[0], 0x0001);
  EXPECT_EQ(bits[1], 0x0400);
  EXPECT_EQ(bits[2], 0x0000);  // 2^-25: a tie, to the even 0
  EXPECT_EQ(bits[3], 0x0002);  // 3 * 2^-25: a tie between 1 and 2 units, to the even 2
  EXPECT_EQ(bits[4], 0x7C00);
  EXPECT_EQ(bits[5], 0xFBFF);
  EXPECT_EQ(bits[6] & 0x7C00, 0x7C00);
  EXPECT_NE(bits[6] & 0x03FF, 0);
  EXPECT_EQ(bits[7], 0x0030);  // 3 * 2^-20 = 48 units of 2^-24
  const float* f = out->at(1).data<float>();
  EXPECT_EQ(f[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(f[7], std::ldexp(3.0f, -20));
  EXPECT_TRUE(std::isinf(f[4]));
  EXPECT_TRUE(std::isnan(f[6]));
}

// An f16 MatMul and a bf16 convolution run on the CPU (tests/ops/cpu/half_precision_test.cc
// checks them against loops); an i32 convolution is refused naming the node and the dtype.
TEST(CastKernelTest, HalfProductsRunAndAnI32ConvolutionNamesTheNodeAndDtype) {
  Scope root = Scope::NewRootScope();
  auto x =
      ops::Cast(root, ops::Const(root, std::vector<float>{1, 2, 3, 4}, Shape{2, 2}), DType::kF16);
  auto y = ops::Cast(root, ops::MatMul(root.WithOpName("half_product"), x, x), DType::kF32);
  auto img =
      ops::Cast(root, ops::Const(root, std::vector<float>(16, 1), Shape{1, 1, 4, 4}), DType::kBF16);
  auto w =
      ops::Cast(root, ops::Const(root, std::vector<float>(4, 1), Shape{1, 1, 2, 2}), DType::kBF16);
  auto conv = ops::Cast(root, ops::Conv2D(root.WithOpName("half_conv"), img, w, {}), DType::kF32);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {y.name(), conv.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).ToVector<float>(), (std::vector<float>{7, 10, 15, 22}));
  EXPECT_EQ(out->at(1).ToVector<float>(), std::vector<float>(9, 4));
  Scope int_root = Scope::NewRootScope();
  auto iimg = ops::Const(int_root, std::vector<int32_t>(16, 1), Shape{1, 1, 4, 4});
  auto iw = ops::Const(int_root, std::vector<int32_t>(4, 1), Shape{1, 1, 2, 2});
  auto iconv = ops::Conv2D(int_root.WithOpName("int_conv"), iimg, iw, {});
  if (!int_root.ok()) {  // refused when built: the op takes float types only
    EXPECT_TRUE(MessageHas(int_root.status(), {"int_conv", "i32"})) << int_root.status().ToString();
    return;
  }
  auto int_session = Session::Create(int_root);
  ASSERT_TRUE(int_session.ok()) << int_session.status().ToString();
  auto int_out = (*int_session)->Run({}, {iconv.name()});
  ASSERT_FALSE(int_out.ok());
  EXPECT_TRUE(MessageHas(int_out.status(), {"int_conv", "i32"})) << int_out.status().ToString();
}

// AllFinite reads f16 and bf16 by their bits: an infinity, a NaN or an f16 overflow (70000) is
// not finite; the largest finite values and subnormals are.
TEST(AllFiniteKernelTest, ReadsHalfPrecisionBits) {
  const float kInf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::kF16, DType::kBF16}) {
    struct Case {
      std::vector<float> values;
      bool finite;
    };
    const float largest = t == DType::kF16 ? 65504.f : 3.3895e38f;
    for (const Case& c : std::vector<Case>{{{1, -2, largest, std::ldexp(1.f, -24)}, true},
                                           {{1, -kInf, 3}, false},
                                           {{std::nanf(""), 0}, false},
                                           {{t == DType::kF16 ? 70000.f : kInf}, false}}) {
      Scope root = Scope::NewRootScope();
      const int64_t n = static_cast<int64_t>(c.values.size());
      auto x = ops::Cast(root, ops::Const(root, c.values, Shape{n}), t);
      auto ones = ops::Cast(root, ops::Const(root, std::vector<float>(5, 1), Shape{5}), t);
      auto finite = root.OutputOf(root.AddNode("AllFinite", {ones, x}, {}));
      ASSERT_TRUE(root.ok()) << root.status().ToString();
      auto session = Session::Create(root);
      ASSERT_TRUE(session.ok()) << session.status().ToString();
      auto out = (*session)->Run({}, {finite.name()});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->at(0).data<bool>()[0], c.finite) << DTypeName(t) << " " << c.values[0];
    }
  }
}

}  // namespace
}  // namespace dflow
