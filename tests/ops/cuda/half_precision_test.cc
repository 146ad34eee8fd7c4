// f16 and bf16 MatMul and Conv2D on a GPU (cuBLASLt and cuDNN on tensor cores, accumulating in
// f32), with Cast in and out on the GPU, against plain loops in double over the inputs rounded
// to the half type. Without a GPU the tests skip, saying why.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
