// f16 and bf16 MatMul and Conv2D on a GPU (cuBLASLt and cuDNN on tensor cores, accumulating in
// f32), with Cast in and out on the GPU, against plain loops in double over the inputs rounded
// to the half type; BatchMatMul, _FusedMatMul, _FusedConv2D and the convolution gradients
// against the CPU's f32 kernels over the rounded inputs; Cast against the CPU's bit for bit.
// Without a GPU the tests skip, saying why (fail where DFLOW_REQUIRE_GPU is set).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu_required.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/cuda/cuda_device.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

// `v` rounded to f16 (to the nearest multiple of its quantum 2^(exponent - 10), at least 2^-24,
// ties to even) or bf16 (nearest even of the top 16 bits, by comparing the two neighbours).
double Round(DType t, float v) {
  if (t == DType::kF16) {
    int e = 0;
    std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
    const double quantum = std::ldexp(1.0, std::max(e - 11, -24));
    return std::nearbyint(v / quantum) * quantum;  // the default rounding: to nearest even
  }
  uint32_t u;
  std::memcpy(&u, &v, 4);
  uint32_t down = u & 0xFFFF0000u, up = down + 0x10000u;
  float fd, fu;
  std::memcpy(&fd, &down, 4);
  std::memcpy(&fu, &up, 4);
  const double dd = std::abs(double{v} - fd), du = std::abs(double{fu} - v);
  if (dd != du) return dd < du ? fd : fu;
  return (down >> 16) % 2 == 0 ? fd : fu;
}

class HalfPrecisionGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  }
  static SessionOptions Options() {
    SessionOptions o;
    o.devices = {"cpu:0", "gpu:0"};
    return o;
  }
  // f32 -> half on the GPU, `op` there, back to f32 for the fetch.
  static Output Half(const Scope& s, Output x) {
    return ops::Cast(s.WithDevice("gpu:0"), x, GetParam());
  }
};

TEST_P(HalfPrecisionGpuTest, MatMulMatchesLoopsOverTheRoundedInputs) {
  const DType t = GetParam();
  const int m = 64, k = 96, n = 80;
  std::vector<float> a = testing::RandomFloats(m * k, 1, -1, 1),
                     b = testing::RandomFloats(k * n, 2, -1, 1);
  Scope root = Scope::NewRootScope();
  auto pa = Half(root, ops::Const(root.WithOpName("a"), a, Shape{m, k}));
  auto pb = Half(root, ops::Const(root.WithOpName("b"), b, Shape{k, n}));
  auto prod = ops::MatMul(root.WithOpName("prod").WithDevice("gpu:0"), pa, pb);
  auto y = ops::Cast(root.WithOpName("y").WithDevice("gpu:0"), prod, DType::kF32);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = LocalSession::Create(root, Options());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {y.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const float* got = out->at(0).data<float>();
  const double tol = t == DType::kF16 ? 2e-3 : 1.5e-2;  // the output's rounding, relative
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int q = 0; q < k; ++q) {
        const double p = Round(t, a[i * k + q]) * Round(t, b[q * n + j]);
        want += p;
        mag += std::abs(p);
      }
      ASSERT_NEAR(got[i * n + j], want, tol * mag + 1e-3) << DTypeName(t) << " " << i << "," << j;
    }
  }
}

TEST_P(HalfPrecisionGpuTest, Conv2DMatchesLoopsOverTheRoundedInputs) {
  const DType t = GetParam();
  const int N = 2, C = 3, H = 8, W = 8, O = 4, K = 3;
  std::vector<float> x = testing::RandomFloats(N * C * H * W, 3, -1, 1),
                     w = testing::RandomFloats(O * C * K * K, 4, -1, 1);
  Scope root = Scope::NewRootScope();
  auto px = Half(root, ops::Const(root.WithOpName("x"), x, Shape{N, C, H, W}));
  auto pw = Half(root, ops::Const(root.WithOpName("w"), w, Shape{O, C, K, K}));
  auto conv =
      ops::Conv2D(root.WithOpName("conv").WithDevice("gpu:0"), px, pw, {.pads = {1, 1, 1, 1}});
  auto y = ops::Cast(root.WithOpName("y").WithDevice("gpu:0"), conv, DType::kF32);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = LocalSession::Create(root, Options());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {y.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->at(0).shape(), (Shape{N, O, H, W}));
  const float* got = out->at(0).data<float>();
  const double tol = t == DType::kF16 ? 2e-3 : 1.5e-2;
  for (int b = 0; b < N; ++b) {
    for (int o = 0; o < O; ++o) {
      for (int r = 0; r < H; ++r) {
        for (int c = 0; c < W; ++c) {
          double want = 0, mag = 0;
          for (int ch = 0; ch < C; ++ch) {
            for (int i = 0; i < K; ++i) {
              for (int j = 0; j < K; ++j) {
                const int rr = r - 1 + i, cc = c - 1 + j;
                if (rr < 0 || rr >= H || cc < 0 || cc >= W) continue;
                const double p = Round(t, x[((b * C + ch) * H + rr) * W + cc]) *
                                 Round(t, w[((o * C + ch) * K + i) * K + j]);
                want += p;
                mag += std::abs(p);
              }
            }
          }
          ASSERT_NEAR(got[((b * O + o) * H + r) * W + c], want, tol * mag + 1e-3)
              << DTypeName(t) << " " << b << "," << o << "," << r << "," << c;
        }
      }
    }
  }
}

// An op in `t` on the GPU (its float inputs cast there from f32, its output cast back) against
// the same op on the CPU in f32 over the inputs rounded to `t`: equal but for the output's
// rounding and the order of the sums, so within `rel` of the largest reference magnitude.
using HalfBuild = std::function<Output(const Scope&, const std::vector<Output>&)>;
void ExpectHalfMatchesCpu(DType t, const std::vector<Tensor>& inputs, const HalfBuild& build,
                          const std::string& what) {
  Scope root = Scope::NewRootScope();
  const Scope gpu = root.WithDevice("gpu:0"), cpu = root.WithDevice("cpu:0");
  std::vector<Output> on_gpu, on_cpu;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> rounded = inputs[i].ToVector<float>();
    for (float& v : rounded) v = static_cast<float>(Round(t, v));
    on_gpu.push_back(ops::Cast(gpu, ops::Const(cpu, inputs[i]), t));
    on_cpu.push_back(ops::Const(cpu, rounded, inputs[i].shape()));
  }
  auto got = ops::Cast(gpu.WithOpName("got"), build(gpu, on_gpu), DType::kF32);
  auto want = ops::Identity(cpu.WithOpName("want"), build(cpu, on_cpu));
  ASSERT_TRUE(root.ok()) << what << ": " << root.status().ToString();
  SessionOptions o;
  o.devices = {"cpu:0", "gpu:0"};
  o.fuse_epilogues = false;  // the node built is the node run
  auto session = LocalSession::Create(root, o);
  ASSERT_TRUE(session.ok()) << what << ": " << session.status().ToString();
  auto out = (*session)->Run({}, {got.name(), want.name()});
  ASSERT_TRUE(out.ok()) << what << ": " << out.status().ToString();
  ASSERT_EQ(out->at(0).shape(), out->at(1).shape()) << what;
  const float* g = out->at(0).data<float>();
  const float* w = out->at(1).data<float>();
  const int64_t n = out->at(1).num_elements();
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(double{w[i]}));
  const double rel = t == DType::kF16 ? 4e-3 : 3e-2;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(g[i], w[i], rel * std::max(scale, 1.0))
        << what << " " << DTypeName(t) << " at " << i;
  }
}

TEST_P(HalfPrecisionGpuTest, BatchMatMulFusedMatMulAndConvolutionGradientsMatchTheCpu) {
  const DType t = GetParam();
  auto uniform = [](const Shape& s, uint32_t seed) {
    return Tensor::FromVector(testing::RandomFloats(s.num_elements(), seed, -1, 1), s);
  };
  ExpectHalfMatchesCpu(
      t, {uniform(Shape{3, 17, 24}, 11), uniform(Shape{3, 24, 9}, 12)},
      [](const Scope& s, const std::vector<Output>& in) {
        return ops::BatchMatMul(s, in[0], in[1]);
      },
      "BatchMatMul");
  for (bool relu : {false, true}) {
    ExpectHalfMatchesCpu(
        t, {uniform(Shape{33, 40}, 13), uniform(Shape{40, 24}, 14), uniform(Shape{24}, 15)},
        [relu](const Scope& s, const std::vector<Output>& in) {
          return s.OutputOf(s.AddNode("_FusedMatMul", {in[0], in[1], in[2]},
                                      {{"transpose_a", false},
                                       {"transpose_b", false},
                                       {"activation", std::string(relu ? "Relu" : "")}}));
        },
        relu ? "_FusedMatMul+Relu" : "_FusedMatMul");
    ExpectHalfMatchesCpu(
        t, {uniform(Shape{2, 3, 9, 9}, 16), uniform(Shape{4, 3, 3, 3}, 17), uniform(Shape{4}, 18)},
        [relu](const Scope& s, const std::vector<Output>& in) {
          return s.OutputOf(s.AddNode("_FusedConv2D", {in[0], in[1], in[2]},
                                      {{"strides", std::vector<int64_t>{1, 1}},
                                       {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                       {"dilations", std::vector<int64_t>{1, 1}},
                                       {"groups", int64_t{1}},
                                       {"activation", std::string(relu ? "Relu" : "")}}));
        },
        relu ? "_FusedConv2D+Relu" : "_FusedConv2D");
  }
  // x [2,3,9,9], w [4,3,3,3], pads 1: dy [2,4,9,9].
  const Tensor x = uniform(Shape{2, 3, 9, 9}, 19), w = uniform(Shape{4, 3, 3, 3}, 20),
               dy = uniform(Shape{2, 4, 9, 9}, 21);
  ExpectHalfMatchesCpu(
      t, {dy, w, x},
      [](const Scope& s, const std::vector<Output>& in) {
        return ops::Conv2DBackpropInput(s, in[0], in[1], in[2], {.pads = {1, 1, 1, 1}});
      },
      "Conv2DBackpropInput");
  ExpectHalfMatchesCpu(
      t, {x, dy, w},
      [](const Scope& s, const std::vector<Output>& in) {
        return ops::Conv2DBackpropFilter(s, in[0], in[1], in[2], {.pads = {1, 1, 1, 1}});
      },
      "Conv2DBackpropFilter");
}

INSTANTIATE_TEST_SUITE_P(Halves, HalfPrecisionGpuTest, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Whether the element at `p` of dtype `t` is a NaN.
bool IsNan(DType t, const unsigned char* p) {
  uint16_t h = 0;
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    default:
      return false;
  }
}

std::string Hex(const unsigned char* p, size_t n) {
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) s += fmt::format("{:02x}", p[i]);
  return s;
}

// Cast on the GPU gives the CPU's Cast bit for bit, for every pair of the dtypes both take,
// on values that probe the roundings: ties, f16's largest finite value and the first that
// overflows, its subnormals and what underflows, infinities and NaN (NaN compared as NaN: its
// payload is not specified). Integer and u8 destinations get only values they can hold.
TEST(CastGpuTest, MatchesTheCpuBitForBit) {
  std::string why;
  DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  const std::vector<double> floats = {
      0.0,           -0.0,         1.0,      -1.0,      0.5,  1.0 / 3, 2.5,   -2.5,   3.5,  65504.0,
      65519.0,       65520.0,      1e5,      6e-5,      3e-7, 1e-8,    1e-30, 3.4e38, 1e39, -1e39,
      1.00048828125, 1.0009765625, INFINITY, -INFINITY, NAN,  255.0,   -7.0,  1e10};
  const std::vector<double> small = {0.0, 1.0, 2.0, 3.0, 7.0, 100.0, 127.0, 200.0, 255.0, 1.5, 2.5};
  const std::vector<DType> types = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                    DType::kI32, DType::kI64, DType::kU8,  DType::kBool};
  auto is_int = [](DType t) { return t == DType::kI32 || t == DType::kI64 || t == DType::kU8; };
  int pairs = 0;
  for (DType from : types) {
    for (DType to : types) {
      if (from == to) continue;
      // Values `from` holds and `to` can take: the small set when either side is an integer.
      const std::vector<double>& values = (is_int(from) || is_int(to)) ? small : floats;
      Scope root = Scope::NewRootScope();
      auto c = ops::Const(root.WithOpName("c").WithDevice("cpu:0"),
                          Tensor::FromVector(values, Shape{static_cast<int64_t>(values.size())}));
      auto src = ops::Cast(root.WithOpName("src").WithDevice("cpu:0"), c, from);
      auto on_gpu = ops::Cast(root.WithOpName("on_gpu").WithDevice("gpu:0"), src, to);
      auto on_cpu = ops::Cast(root.WithOpName("on_cpu").WithDevice("cpu:0"), src, to);
      ASSERT_TRUE(root.ok()) << root.status().ToString();
      SessionOptions o;
      o.devices = {"cpu:0", "gpu:0"};
      auto session = LocalSession::Create(root, o);
      ASSERT_TRUE(session.ok()) << session.status().ToString();
      auto out = (*session)->Run({}, {on_gpu.name(), on_cpu.name()});
      ASSERT_TRUE(out.ok()) << DTypeName(from) << " -> " << DTypeName(to) << ": "
                            << out.status().ToString();
      const Tensor& g = out->at(0);
      const Tensor& w = out->at(1);
      ASSERT_EQ(g.dtype(), to);
      ASSERT_EQ(g.num_bytes(), w.num_bytes());
      const size_t size = DTypeSize(to);
      for (int64_t i = 0; i < w.num_elements(); ++i) {
        const auto* pg = static_cast<const unsigned char*>(g.raw_data()) + i * size;
        const auto* pw = static_cast<const unsigned char*>(w.raw_data()) + i * size;
        if (std::memcmp(pg, pw, size) == 0) continue;
        EXPECT_TRUE(IsNan(to, pg) && IsNan(to, pw))
            << DTypeName(from) << " -> " << DTypeName(to) << " of " << values[i] << ": GPU "
            << Hex(pg, size) << ", CPU " << Hex(pw, size);
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 56);
}

}  // namespace
}  // namespace dflow
