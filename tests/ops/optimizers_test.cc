// Optimizers against plain-loop references of their update rules, over several steps, and the
// initialisers' distributions and reproducibility.
#include "ops/optimizers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/random_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

// loss = sum((w - target)^2) / 2, so grad = w - target.
struct Problem {
  Scope root = Scope::NewRootScope();
  std::vector<float> w0 = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> target = {0.0f, 1.0f, -1.0f, 2.0f};
  ops::VariableAndInit w;
  Output loss;

  Problem() {
    w = ops::InitializedVariable(root.WithOpName("w"), Shape{4}, ops::Initializer::Zeros());
    auto set = ops::Assign(root.WithOpName("set_w"), w.var, ops::Const(root, w0, Shape{4}));
    (void)set;
    loss = ops::Mul(
        root,
        ops::ReduceSum(
            root, ops::Square(root, ops::Sub(root, w.var, ops::Const(root, target, Shape{4})))),
        ops::Const(root, 0.5f));
  }

  // Runs `steps` training steps; returns w after each.
  std::vector<std::vector<float>> Train(ops::Optimizer& opt, int steps) {
    auto train = opt.Minimize(root, loss, {w.var});
    EXPECT_TRUE(root.ok()) << root.status().ToString();
    auto s = Session::Create(root);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::vector<std::vector<float>> out;
    if (!s.ok()) return out;
    EXPECT_TRUE((*s)->Run({}, {}, {"set_w"}).ok());
    if (!opt.init_targets().empty()) {
      EXPECT_TRUE((*s)->Run({}, {}, opt.init_targets()).ok());
    }
    for (int i = 0; i < steps; ++i) {
      auto r = (*s)->Run({}, {}, {train.name()});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      auto v = (*s)->Run({}, {"w"});
      EXPECT_TRUE(v.ok());
      if (v.ok()) out.push_back(v->at(0).ToVector<float>());
    }
    return out;
  }
};

void ExpectClose(const std::vector<std::vector<float>>& got,
                 const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    for (size_t i = 0; i < want[s].size(); ++i) {
      EXPECT_NEAR(got[s][i], want[s][i], 1e-5 * (1 + std::abs(want[s][i]))) << "step " << s;
    }
  }
}

TEST(OptimizerTest, SGD) {
  Problem p;
  ops::SGD opt({.learning_rate = 0.1});
  auto got = p.Train(opt, 3);
  std::vector<double> w(p.w0.begin(), p.w0.end());
  std::vector<std::vector<double>> want;
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 4; ++i) w[i] -= 0.1 * (w[i] - p.target[i]);
    want.push_back(w);
  }
  ExpectClose(got, want);
}

TEST(OptimizerTest, MomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    Problem p;
    ops::Momentum opt({.learning_rate = 0.1, .momentum = 0.9, .nesterov = nesterov});
    auto got = p.Train(opt, 4);
    std::vector<double> w(p.w0.begin(), p.w0.end()), a(4, 0.0);
    std::vector<std::vector<double>> want;
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) {
        double g = w[i] - p.target[i];
        a[i] = 0.9 * a[i] + g;
        w[i] -= 0.1 * (nesterov ? g + 0.9 * a[i] : a[i]);
      }
      want.push_back(w);
    }
    ExpectClose(got, want);
  }
}

TEST(OptimizerTest, AdamAndAdamW) {
  for (double decay : {0.0, 0.01}) {
    Problem p;
    ops::Adam opt({.learning_rate = 0.05, .weight_decay = decay});
    auto got = p.Train(opt, 5);
    std::vector<double> w(p.w0.begin(), p.w0.end()), m(4, 0.0), v(4, 0.0);
    std::vector<std::vector<double>> want;
    for (int t = 1; t <= 5; ++t) {
      double step = 0.05 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      for (int i = 0; i < 4; ++i) {
        double g = w[i] - p.target[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        w[i] = w[i] - 0.05 * decay * w[i] - step * m[i] / (std::sqrt(v[i]) + 1e-8);
      }
      want.push_back(w);
    }
    ExpectClose(got, want);
    // Decoupled weight decay runs as the op AdamW users look for.
    int adam = 0, adamw = 0;
    for (int id = 0; id < p.root.graph().num_nodes(); ++id) {
      adam += p.root.graph().node(id).op() == "ApplyAdam";
      adamw += p.root.graph().node(id).op() == "ApplyAdamW";
    }
    EXPECT_EQ(adamw, decay > 0 ? 1 : 0);
    EXPECT_EQ(adam, decay > 0 ? 0 : 1);
  }
}

TEST(OptimizerTest, FetchedValueIsASnapshot) {
  Problem p;
  ops::SGD opt({.learning_rate = 0.5});
  auto train = opt.Minimize(p.root, p.loss, {p.w.var});
  auto s = Session::Create(p.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, {"set_w"}).ok());
  auto before = (*s)->Run({}, {"w"});
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE((*s)->Run({}, {}, {train.name()}).ok());
  EXPECT_EQ(before->at(0).ToVector<float>(), p.w0);
}

TEST(OptimizerTest, UninitialisedSlotsAreAnErrorNamingThem) {
  Problem p;
  ops::Adam opt({});
  auto train = opt.Minimize(p.root, p.loss, {p.w.var});
  auto s = Session::Create(p.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, {"set_w"}).ok());
  auto r = (*s)->Run({}, {}, {train.name()});  // init_targets() not run
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(r.status(), {"w/update/"}));
}

// Each update waits for the step's readers of its variable (so it can write in place), but not
// for readers outside the step, and its slot variables wait for nothing.
TEST(OptimizerTest, UpdatesWaitForTheStepsReadersOnly) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3});
  auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{3, 3}, ops::Initializer::Zeros());
  auto y = ops::MatMul(root.WithOpName("forward"), x, w.var);
  ops::Identity(root.WithOpName("eval_read"), w.var);  // not part of the step
  ops::Adam adam({});
  auto step = adam.Minimize(root, ops::ReduceSum(root, ops::Mul(root, y, y)), {w.var});
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  const Graph& g = root.graph();
  std::vector<std::string> waits, slot_waits;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op() == "ApplyAdam") waits = n.def().control_inputs;
    if (n.op() == "Variable" && n.name() != "w" && !n.def().control_inputs.empty()) {
      slot_waits.push_back(n.name());
    }
  }
  EXPECT_NE(std::find(waits.begin(), waits.end(), "forward"), waits.end());
  EXPECT_EQ(std::find(waits.begin(), waits.end(), "eval_read"), waits.end());
  EXPECT_TRUE(slot_waits.empty());
  // The step still runs and updates w.
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  std::vector<std::string> init = adam.init_targets();
  init.push_back(w.init.node_name());
  ASSERT_TRUE((*session)->Run({}, {}, init).ok());
  auto xv = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  ASSERT_TRUE((*session)->Run({{"x", xv}}, {}, {step.name()}).ok());
}

TEST(OptimizerTest, MinimizeRefusesNonVariables) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto loss = ops::ReduceSum(root, ops::Square(root, x));
  ops::SGD opt({});
  opt.Minimize(root, loss, {x});
  EXPECT_TRUE(MessageHas(root.status(), {"'x' is not a Variable"}));
}

// UniformLike gives NumPy's stream: np.random.seed(0); np.random.uniform(0, 1, 6) is
// 0.5488135039273248, 0.7151893663724195, 0.6027633760716439, 0.5448831829968969,
// 0.4236547993389047, 0.6458941130666561 (NumPy's documented first draws). The next run goes on
// of the same step goes on with the stream (np.random.uniform's next six).
TEST(InitializerTest, UniformLikeIsNumPysStream) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3});
  auto u = ops::UniformLike(root.WithOpName("u"), x, 0);
  auto f = ops::UniformLike(root.WithOpName("f"), x, 0, DType::kF32);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const Tensor shape_only(DType::kF32, Shape{2, 3});
  auto first = (*session)->Run({{"x", shape_only}}, {u.name(), f.name()});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::vector<double> numpy = {0.5488135039273248, 0.7151893663724195, 0.6027633760716439,
                                     0.5448831829968969, 0.4236547993389047, 0.6458941130666561};
  EXPECT_EQ(first->at(0).shape(), Shape({2, 3}));
  std::vector<double> got = first->at(0).ToVector<double>();
  std::vector<float> got_f32 = first->at(1).ToVector<float>();
  for (size_t i = 0; i < numpy.size(); ++i) {
    EXPECT_NEAR(got[i], numpy[i], 1e-15) << i;
    EXPECT_EQ(got_f32[i], static_cast<float>(numpy[i])) << i;
  }
  auto next = (*session)->Run({{"x", shape_only}}, {u.name(), f.name()});  // the same step
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  // np.random.uniform(0, 1, 12)[6:] after np.random.seed(0).
  const std::vector<double> after = {0.4375872112626925, 0.8917730007820798, 0.9636627605010293,
                                     0.3834415188257777, 0.7917250380826646, 0.5288949197529045};
  got = next->at(0).ToVector<double>();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(got[i], after[i], 1e-15) << i;
}

TEST(InitializerTest, DistributionsAndSeeds) {
  Scope root = Scope::NewRootScope();
  auto g1 = ops::InitialValue(root, Shape{200, 300}, ops::Initializer::GlorotUniform(7));
  auto g2 = ops::InitialValue(root, Shape{200, 300}, ops::Initializer::GlorotUniform(7));
  auto g3 = ops::InitialValue(root, Shape{200, 300}, ops::Initializer::GlorotUniform(8));
  auto he = ops::InitialValue(root, Shape{500, 100}, ops::Initializer::HeNormal(3));
  auto c = ops::InitialValue(root, Shape{3}, ops::Initializer::Constant(2.5));
  auto u = ops::InitialValue(root, Shape{1000}, ops::Initializer::Uniform(2, 3, 1));
  auto out = testing::RunScope(root, {}, {g1, g2, g3, he, c, u});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(out[0].BitwiseEquals(out[1]));   // same seed, same values
  EXPECT_FALSE(out[0].BitwiseEquals(out[2]));  // another seed, other values
  double limit = std::sqrt(6.0 / 500), max_abs = 0;
  for (float v : out[0].flat<float>()) max_abs = std::max(max_abs, double(std::abs(v)));
  EXPECT_LE(max_abs, limit);
  EXPECT_GT(max_abs, 0.95 * limit);
  double sum = 0, sq = 0;
  for (float v : out[3].flat<float>()) {
    sum += v;
    sq += double(v) * v;
  }
  double n = out[3].num_elements(), mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0, 0.01);
  EXPECT_NEAR(stddev, std::sqrt(2.0 / 500), 0.003);
  EXPECT_EQ(out[4].ToVector<float>(), std::vector<float>({2.5f, 2.5f, 2.5f}));
  for (float v : out[5].flat<float>()) {
    EXPECT_GE(v, 2.0f);
    EXPECT_LT(v, 3.0f);
  }
  EXPECT_EQ(ops::Fans(Shape{16, 3, 5, 5}), std::make_pair(75.0, 400.0));
}

}  // namespace
}  // namespace dflow
