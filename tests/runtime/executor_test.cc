// The executor through Session: results against plain loops, pruning, release of values,
// error propagation with the first error kept, several inter-op threads, concurrent runs.
#include "runtime/executor.h"

#include <gtest/gtest.h>

#include <thread>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RandomFloats;

// A two-layer MLP y = relu(x·W1 + b1)·W2 with its plain-loop reference.
struct Mlp {
  Scope root = Scope::NewRootScope();
  Output x, y;
  std::vector<float> w1 = RandomFloats(6 * 8, 1), b1 = RandomFloats(8, 2),
                     w2 = RandomFloats(8 * 3, 3);

  Mlp() {
    x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 6});
    auto h =
        ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, ops::Const(root, w1, Shape{6, 8})),
                                     ops::Const(root, b1, Shape{8})));
    y = ops::MatMul(root.WithOpName("y"), h, ops::Const(root, w2, Shape{8, 3}));
  }

  std::vector<float> Reference(const std::vector<float>& in, int batch) const {
    std::vector<float> out(batch * 3, 0);
    for (int r = 0; r < batch; ++r) {
      float h[8];
      for (int j = 0; j < 8; ++j) {
        float acc = b1[j];
        for (int k = 0; k < 6; ++k) acc += in[r * 6 + k] * w1[k * 8 + j];
        h[j] = std::max(acc, 0.0f);
      }
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 8; ++k) out[r * 3 + j] += h[k] * w2[k * 3 + j];
      }
    }
    return out;
  }
};

void ExpectNear(const Tensor& t, const std::vector<float>& want) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(t.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }
}

TEST(ExecutorTest, MlpMatchesPlainLoops) {
  Mlp m;
  auto in = RandomFloats(5 * 6, 4);
  auto out = testing::RunScope(m.root, {{"x", Tensor::FromVector<float>(in, Shape{5, 6})}}, {m.y});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], m.Reference(in, 5));
}

TEST(ExecutorTest, ManyInterOpThreadsGiveTheSameResults) {
  // A wide graph of independent expensive branches, run with 1 and with 3 inter-op threads.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{128, 128});
  std::vector<Output> branches;
  for (int i = 0; i < 12; ++i) {
    auto w = ops::Const(root, RandomFloats(128 * 128, 100 + i), Shape{128, 128});
    branches.push_back(ops::Relu(root, ops::MatMul(root, x, w)));
  }
  Output sum = branches[0];
  for (int i = 1; i < 12; ++i) sum = ops::Add(root, sum, branches[i]);
  auto total = ops::ReduceSum(root.WithOpName("total"), sum, {0});
  Tensor in = Tensor::FromVector<float>(RandomFloats(128 * 128, 9), Shape{128, 128});
  std::vector<Tensor> results;
  for (int inter : {1, 3}) {
    SessionOptions opts;
    opts.threads = {3, inter};
    auto s = Session::Create(root, opts);
    ASSERT_TRUE(s.ok());
    for (int rep = 0; rep < 5; ++rep) {
      auto out = (*s)->Run({{"x", in}}, {total.name()});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      results.push_back(out->at(0));
    }
  }
  for (const auto& r : results) {
    for (int j = 0; j < 128; ++j) {
      EXPECT_NEAR(r.data<float>()[j], results[0].data<float>()[j],
                  1e-3 * (1 + std::abs(results[0].data<float>()[j])));
    }
  }
}

TEST(ExecutorTest, PrunesWhatTheFetchesDoNotNeed) {
  // The failing branch is never run when only the good one is fetched.
  Scope root = Scope::NewRootScope();
  auto good = ops::Add(root.WithOpName("good"), ops::Const(root, 2), ops::Const(root, 3));
  auto bad = ops::Div(root.WithOpName("bad"), ops::Const(root, 1), ops::Const(root, 0));
  auto s = Session::Create(root);
  ASSERT_TRUE(s.ok());
  auto out = (*s)->Run({}, {good.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).ToVector<int32_t>(), std::vector<int32_t>({5}));
  EXPECT_EQ((*s)->Run({}, {bad.name()}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExecutorTest, ErrorStopsTheRunAndNamesTheNode) {
  // A chain whose 50th node fails; later nodes never run, and the run returns (no hang).
  for (int inter : {1, 2}) {
    Scope root = Scope::NewRootScope();
    auto zero = ops::Const(root, 0);
    Output y = ops::Const(root, 7);
    for (int i = 0; i < 100; ++i) {
      y = i == 50 ? ops::Div(root.WithOpName("fails_here"), y, zero) : ops::Add(root, y, zero);
    }
    SessionOptions opts;
    opts.threads = {2, inter};
    auto s = Session::Create(root, opts);
    ASSERT_TRUE(s.ok());
    auto out = (*s)->Run({}, {y.name()});
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(out.status(),
                           {"node 'fails_here' (Div) on /job:localhost/task:0/device:CPU:0"}));
    // The session stays usable after an error.
    EXPECT_EQ((*s)->Run({}, {y.name()}).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ExecutorTest, FirstErrorWinsAmongParallelFailures) {
  // Many failing branches run on 3 threads: exactly one error comes back, unchanged.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kI32, Shape{-1});
  std::vector<Output> outs;
  for (int i = 0; i < 20; ++i) {
    outs.push_back(ops::Div(root.WithOpName("div" + std::to_string(i)), ops::Const(root, i), x));
  }
  auto sink = ops::NoOp(root.WithControlDependencies(outs).WithOpName("sink"));
  SessionOptions opts;
  opts.threads = {3, 3};
  auto s = Session::Create(root, opts);
  ASSERT_TRUE(s.ok());
  auto out = (*s)->Run({{"x", Tensor::FromVector<int32_t>({1, 0}, Shape{2})}}, {}, {sink.name()});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), {"node 'div", "(Div)", "division by zero"}));
  EXPECT_EQ(out.status().message().find("node '", 1), std::string::npos)
      << "one error, not several: " << out.status().message();
}

TEST(ExecutorTest, ConcurrentRunsOfOnePlan) {
  Mlp m;
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto in = RandomFloats(3 * 6, 1000 * t + i);
        auto out = (*s)->Run({{"x", Tensor::FromVector<float>(in, Shape{3, 6})}}, {m.y.name()});
        if (!out.ok()) {
          ++failures;
          continue;
        }
        auto want = m.Reference(in, 3);
        for (int j = 0; j < 9; ++j) {
          if (std::abs(out->at(0).data<float>()[j] - want[j]) > 1e-4 * (1 + std::abs(want[j]))) {
            ++failures;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ((*s)->num_plans(), 1);
}

TEST(ExecutorTest, ReleasesValuesAfterLastConsumer) {
  // A chain of 20 element-wise ops on 1 MiB tensors keeps at most two buffers alive at once.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{256 * 1024});
  Output y = x;
  for (int i = 0; i < 20; ++i) y = ops::Add(root, y, x);  // x has many readers: no in place
  auto s = LocalSession::Create(root);
  ASSERT_TRUE(s.ok());
  Tensor in(DType::kF32, Shape{256 * 1024});
  for (auto& v : in.flat<float>()) v = 1;
  auto out = (*s)->Run({{"x", in}}, {y.name()});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->at(0).data<float>()[12345], 21.0f);
  EXPECT_LE((*s)->device().memory().peak, 2u * 1024 * 1024);
}

}  // namespace
}  // namespace dflow
