// The mixed-precision rewrite (rewrite/mixed_precision.h) on a two-layer MLP's training graph:
// which nodes it converts and casts; training that matches the same model with its casts written
// by hand before Minimize (autodiff through Cast: an independent way to the same graph), and that
// stays close to f32; loss scaling that changes nothing but the scale when nothing overflows,
// skips a step whose gradients are not finite (variables, Adam's moments and step untouched),
// backs off and grows; f16 gradients that underflow without scaling and survive with it; errors.
#include "rewrite/mixed_precision.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "rewrite/replicate.h"
#include "rewrite/replicate_fixture.h"
#include "runtime/session.h"
#include "test_util.h"

namespace dflow {
namespace {

using Scaling = ops::MixedPrecisionOptions::LossScaling;
using testing::MessageHas;

using Model = Mlp;

std::unique_ptr<Session> Start(const Graph& g, std::vector<std::string> init) {
  auto session = Session::Create(g);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return nullptr;
  Status s = (*session)->Run({}, {}, init).status();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::move(*session);
}

std::vector<std::vector<float>> Fetch(Session& s, const std::vector<std::string>& names) {
  auto out = s.Run({}, names);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  std::vector<std::vector<float>> values;
  if (!out.ok()) return values;
  for (const Tensor& t : *out) {
    if (t.dtype() == DType::kI64) {
      values.push_back({static_cast<float>(t.data<int64_t>()[0])});
    } else {
      values.push_back(t.ToVector<float>());
    }
  }
  return values;
}

float Step(Session& s, const Model& m, const Session::Feeds& feeds) {
  auto out = s.Run(feeds, {m.loss}, {m.step});
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? (*out)[0].data<float>()[0] : std::nanf("");
}

void ExpectClose(const std::vector<std::vector<float>>& got,
                 const std::vector<std::vector<float>>& want, double rel,
                 const std::vector<std::string>& names, double abs = 1e-7) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t v = 0; v < got.size(); ++v) {
    ASSERT_EQ(got[v].size(), want[v].size()) << names[v];
    for (size_t i = 0; i < got[v].size(); ++i) {
      ASSERT_NEAR(got[v][i], want[v][i], rel * std::abs(want[v][i]) + abs)
          << names[v] << "[" << i << "]";
    }
  }
}

// `s` is an error of `code` whose message holds `text`.
::testing::AssertionResult Refused(const Status& s, StatusCode code, const std::string& text) {
  if (s.code() != code) return ::testing::AssertionFailure() << "wrong code: " << s.ToString();
  return MessageHas(s, {text});
}

ops::MixedPrecisionGraph Rewrite(const Graph& g, const ops::MixedPrecisionOptions& o) {
  auto r = ops::MixedPrecision(g, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : ops::MixedPrecisionGraph{};
}

TEST(MixedPrecisionTest, ConvertsEveryProductAndKeepsTheRestF32) {
  Model model(/*adam=*/true);
  const Graph g = model.graph();
  int products = 0;
  for (int id = 0; id < g.num_nodes(); ++id) products += g.node(id).op() == "MatMul";
  ASSERT_GE(products, 5);  // two forward, two weight gradients, one input gradient
  ops::MixedPrecisionGraph mp = Rewrite(g, {.compute = DType::kBF16});
  ASSERT_NE(mp.graph, nullptr);
  const Graph& out = *mp.graph;
  EXPECT_EQ(mp.converted, products);
  int half = 0;
  for (int id = 0; id < out.num_nodes(); ++id) {
    const Node& n = out.node(id);
    if (n.op() == "MatMul") {
      ++half;
      EXPECT_EQ(n.output_dtype(0), DType::kBF16) << n.name();
      EXPECT_TRUE(n.name().ends_with("/bf16")) << n.name();
      // Under its old name, the product in f32 for its readers.
      const Node& back = out.node(*out.FindNode(n.name().substr(0, n.name().size() - 5)));
      EXPECT_EQ(back.op(), "Cast");
      EXPECT_EQ(back.output_dtype(0), DType::kF32);
    }
    if (n.role() == OpRole::kVariable && n.name().find("step") == std::string::npos) {
      EXPECT_EQ(n.output_dtype(0), DType::kF32) << n.name();
    }
    if (n.op() == "ApplyAdam") {
      EXPECT_EQ(out.node(n.inputs()[5].node).output_dtype(n.inputs()[5].index), DType::kF32)
          << n.name();
    }
  }
  EXPECT_EQ(half, products);
  // Each weight is cast once, for its forward product and the backward one that reads it.
  for (const char* w : {"w0", "w1"}) {
    int casts = 0;
    for (int id = 0; id < out.num_nodes(); ++id) {
      const Node& n = out.node(id);
      casts += n.op() == "Cast" && out.node(n.inputs()[0].node).name() == w;
    }
    EXPECT_EQ(casts, 1) << w;
  }
  EXPECT_GT(mp.casts, products);
  // Applied again, it finds nothing left in f32 to convert.
  ops::MixedPrecisionGraph again = Rewrite(out, {.compute = DType::kBF16});
  EXPECT_EQ(again.converted, 0);
  EXPECT_EQ(again.casts, 0);
}

// The rewrite of the f32 graph and the model with its casts written before Minimize train alike:
// the same products on the same rounded operands, step after step.
TEST(MixedPrecisionTest, TrainsAsTheModelWithItsCastsWrittenByHand) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "Adam" : "SGD");
    Model plain(adam), by_hand(adam, {.hand_cast = DType::kBF16});
    ops::MixedPrecisionGraph mp = Rewrite(plain.graph(), {.compute = DType::kBF16});
    ASSERT_NE(mp.graph, nullptr);
    auto rewritten = Start(*mp.graph, plain.init);
    auto hand = Start(by_hand.graph(), by_hand.init);
    ASSERT_TRUE(rewritten && hand);
    for (int step = 0; step < 6; ++step) {
      const Session::Feeds feeds = Batch(step, 12);
      const float a = Step(*rewritten, plain, feeds), b = Step(*hand, by_hand, feeds);
      EXPECT_NEAR(a, b, 1e-6 * std::abs(b)) << "step " << step;
    }
    ExpectClose(Fetch(*rewritten, plain.variables), Fetch(*hand, by_hand.variables), 1e-6,
                plain.variables);
  }
}

// Two convolutions (the second's input gradient and both filter gradients converted too) train
// as the same model with its casts written by hand.
TEST(MixedPrecisionTest, ConvolutionsTrainAsWithTheirCastsWrittenByHand) {
  auto build = [](DType hand_cast, std::vector<std::string>& init) {
    Scope root = Scope::NewRootScope();
    Output x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1, 6, 6});
    std::vector<Output> vars;
    Output h = x;
    const Shape shapes[] = {Shape{4, 1, 3, 3}, Shape{3, 4, 3, 3}};
    for (int l = 0; l < 2; ++l) {
      auto w = ops::InitializedVariable(root.WithOpName(fmt::format("w{}", l)), shapes[l],
                                        ops::Initializer::HeNormal(l + 7));
      vars.push_back(w.var);
      init.push_back(w.init.node_name());
      const ops::Conv2DAttrs attrs{.pads = {1, 1, 1, 1}};
      h = hand_cast == DType::kInvalid
              ? ops::Conv2D(root, h, w.var, attrs)
              : ops::Cast(root,
                          ops::Conv2D(root, ops::Cast(root, h, hand_cast),
                                      ops::Cast(root, w.var, hand_cast), attrs),
                          DType::kF32);
      if (l == 0) h = ops::Relu(root, h);
    }
    Output loss = ops::ReduceMean(root.WithOpName("loss"), ops::Square(root, h));
    ops::SGD({.learning_rate = 0.1}).Minimize(root, loss, vars);
    Graph g = root.graph();
    EXPECT_TRUE(g.Validate().ok());
    return g;
  };
  std::vector<std::string> init_plain, init_hand;
  const Graph plain = build(DType::kInvalid, init_plain);
  ops::MixedPrecisionGraph mp = Rewrite(plain, {.compute = DType::kBF16});
  ASSERT_NE(mp.graph, nullptr);
  EXPECT_EQ(mp.converted, 5);  // two forward, two filter gradients, one input gradient
  auto rewritten = Start(*mp.graph, init_plain);
  const Graph by_hand = build(DType::kBF16, init_hand);
  auto hand = Start(by_hand, init_hand);
  ASSERT_TRUE(rewritten && hand);
  for (int step = 0; step < 4; ++step) {
    Tensor x(DType::kF32, Shape{2, 1, 6, 6});
    std::vector<float> v = testing::RandomFloats(72, step + 1);
    std::copy(v.begin(), v.end(), x.data<float>());
    auto a = rewritten->Run({{"x", x}}, {"loss"}, {"train_step"});
    auto b = hand->Run({{"x", x}}, {"loss"}, {"train_step"});
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ((*a)[0].data<float>()[0], (*b)[0].data<float>()[0]) << "step " << step;
  }
  ExpectClose(Fetch(*rewritten, {"w0", "w1"}), Fetch(*hand, {"w0", "w1"}), 1e-6, {"w0", "w1"});
}

// bf16 products follow the f32 training closely, and the loss falls as it does.
TEST(MixedPrecisionTest, Bf16TrainingStaysCloseToF32) {
  Model f32(/*adam=*/true), mixed(/*adam=*/true);
  ops::MixedPrecisionGraph mp = Rewrite(mixed.graph(), {.compute = DType::kBF16});
  ASSERT_NE(mp.graph, nullptr);
  auto a = Start(f32.graph(), f32.init);
  auto b = Start(*mp.graph, mixed.init);
  ASSERT_TRUE(a && b);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const Session::Feeds feeds = Batch(step % 3, 24);
    const float la = Step(*a, f32, feeds), lb = Step(*b, mixed, feeds);
    EXPECT_NEAR(lb, la, 2e-2 * std::abs(la)) << "step " << step;
    if (step == 0) first = lb;
    if (step % 3 == 0) last = lb;  // batch 0 again
  }
  EXPECT_LT(last, 0.8 * first);
  ExpectClose(Fetch(*b, mixed.variables), Fetch(*a, f32.variables), 0.05, f32.variables, 0.01);
}

// A power of two scales and unscales exactly: with nothing overflowing, the scaled training is
// the unscaled one, static or dynamic.
TEST(MixedPrecisionTest, LossScalingWithoutOverflowChangesNothingButTheScale) {
  for (Scaling mode : {Scaling::kStatic, Scaling::kDynamic}) {
    SCOPED_TRACE(mode == Scaling::kStatic ? "static" : "dynamic");
    Model unscaled(true), scaled(true);
    ops::MixedPrecisionGraph a = Rewrite(unscaled.graph(), {.compute = DType::kBF16});
    ops::MixedPrecisionGraph b = Rewrite(scaled.graph(), {.compute = DType::kBF16,
                                                          .loss_scaling = mode,
                                                          .loss = scaled.loss,
                                                          .initial_scale = 1024,
                                                          .growth_interval = 1000});
    ASSERT_TRUE(a.graph && b.graph);
    EXPECT_EQ(b.loss_scale, "mixed_precision/loss_scale");
    std::vector<std::string> init = scaled.init;
    init.insert(init.end(), b.init_targets.begin(), b.init_targets.end());
    auto sa = Start(*a.graph, unscaled.init);
    auto sb = Start(*b.graph, init);
    ASSERT_TRUE(sa && sb);
    for (int step = 0; step < 5; ++step) {
      const Session::Feeds feeds = Batch(step, 12);
      const float la = Step(*sa, unscaled, feeds), lb = Step(*sb, scaled, feeds);
      EXPECT_EQ(la, lb) << "step " << step;  // the loss itself is never scaled
    }
    std::vector<std::string> names = scaled.variables;
    names.insert(names.end(), scaled.state.begin(), scaled.state.end());
    ExpectClose(Fetch(*sb, names), Fetch(*sa, names), 1e-6, names);
    EXPECT_EQ(Fetch(*sb, {b.loss_scale})[0][0], 1024.f);
  }
}

// Dynamic scaling: a step with a NaN gradient is skipped whole (variables, moments, step count)
// and halves the scale; `growth_interval` good steps double it; the good steps in between
// match the unscaled run that never saw the poisoned batch.
TEST(MixedPrecisionTest, DynamicScalingSkipsANonFiniteStepBacksOffAndGrows) {
  Model unscaled(true), scaled(true);
  ops::MixedPrecisionGraph a = Rewrite(unscaled.graph(), {.compute = DType::kBF16});
  ops::MixedPrecisionGraph b = Rewrite(scaled.graph(), {.compute = DType::kBF16,
                                                        .loss_scaling = Scaling::kDynamic,
                                                        .loss = scaled.loss,
                                                        .initial_scale = 1024,
                                                        .growth_interval = 3});
  ASSERT_TRUE(a.graph && b.graph);
  EXPECT_EQ(b.grads_finite, "mixed_precision/grads_finite");
  ASSERT_EQ(b.init_targets.size(), 2u);
  std::vector<std::string> init = scaled.init;
  init.insert(init.end(), b.init_targets.begin(), b.init_targets.end());
  auto sa = Start(*a.graph, unscaled.init);
  auto sb = Start(*b.graph, init);
  ASSERT_TRUE(sa && sb);
  std::vector<std::string> names = scaled.variables;
  names.insert(names.end(), scaled.state.begin(), scaled.state.end());
  auto run = [&](const Session::Feeds& feeds) {
    auto out = sb->Run(feeds, {b.grads_finite, b.loss_scale}, {scaled.step});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::make_pair((*out)[0].data<bool>()[0], (*out)[1].data<float>()[0])
                    : std::make_pair(true, 0.f);
  };
  // One good step: the scale read in it is 1024.
  EXPECT_EQ(run(Batch(0, 12)), std::make_pair(true, 1024.f));
  Step(*sa, unscaled, Batch(0, 12));
  const auto before = Fetch(*sb, names);
  // The poisoned step: skipped, the scale halved.
  EXPECT_EQ(run(Batch(1, 12, /*poison=*/true)), std::make_pair(false, 1024.f));
  const auto after = Fetch(*sb, names);
  for (size_t v = 0; v < names.size(); ++v) EXPECT_EQ(after[v], before[v]) << names[v];
  EXPECT_EQ(Fetch(*sb, {b.loss_scale})[0][0], 512.f);
  // Three good steps: the scale doubles after the third.
  for (int step = 2; step < 5; ++step) {
    EXPECT_EQ(run(Batch(step, 12)), std::make_pair(true, 512.f)) << "step " << step;
    Step(*sa, unscaled, Batch(step, 12));
  }
  EXPECT_EQ(Fetch(*sb, {b.loss_scale})[0][0], 1024.f);
  ExpectClose(Fetch(*sb, names), Fetch(*sa, names), 1e-6, names);
}

// After Replicate: each replica's seed is scaled, one check of replica 0's averaged gradients
// gates every replica, and two replicas train as one does on the whole batch, skipping the
// poisoned step together.
TEST(MixedPrecisionTest, DataParallelReplicasScaleAndSkipTogether) {
  Model single(true), model(true);
  const ops::MixedPrecisionOptions options{.compute = DType::kBF16,
                                           .loss_scaling = Scaling::kDynamic,
                                           .loss = model.loss,
                                           .initial_scale = 1024};
  ops::MixedPrecisionGraph one = Rewrite(single.graph(), options);
  auto replicated =
      ops::Replicate(model.graph(), {.devices = {"cpu:0", "cpu:1"}, .averaged = {model.loss}});
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  ops::MixedPrecisionGraph two = Rewrite(*replicated->graph, options);
  ASSERT_TRUE(one.graph && two.graph);
  int seeds = 0, checked = -1;
  for (int id = 0; id < two.graph->num_nodes(); ++id) {
    const Node& n = two.graph->node(id);
    seeds += n.name().starts_with("mixed_precision/scaled_seed");
    if (n.name() == two.grads_finite) checked = n.num_inputs();
  }
  EXPECT_EQ(seeds, 2);
  EXPECT_EQ(checked, 4);  // replica 0's four gradients
  std::vector<std::string> init1 = single.init, init2 = model.init;
  init1.insert(init1.end(), one.init_targets.begin(), one.init_targets.end());
  init2.insert(init2.end(), two.init_targets.begin(), two.init_targets.end());
  auto s1 = Start(*one.graph, init1);
  auto session = Session::Create(*two.graph, testing::Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto s2 = std::move(*session);
  ASSERT_TRUE(s2->Run({}, {}, init2).ok());
  for (int step = 0; step < 5; ++step) {
    const bool poison = step == 2;  // in replica 1's half of the batch
    Session::Feeds feeds = Batch(step, 12);
    if (poison) feeds[0].second.data<float>()[8 * 9] = std::nanf("");
    auto a = s1->Run(feeds, {single.loss, one.grads_finite}, {single.step});
    auto b = s2->Run(feeds, {model.loss, two.grads_finite}, {model.step});
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ((*b)[1].data<bool>()[0], !poison) << "step " << step;
    EXPECT_EQ((*a)[1].data<bool>()[0], !poison) << "step " << step;
    if (!poison) {  // each replica's products round its half of the batch: bf16's tolerance
      EXPECT_NEAR((*b)[0].data<float>()[0], (*a)[0].data<float>()[0], 1e-3) << "step " << step;
    }
  }
  std::vector<std::string> names = model.variables, copies;
  for (const auto& v : model.variables) copies.push_back("replica1/" + v);
  const auto got = Fetch(*s2, names);
  EXPECT_EQ(Fetch(*s2, copies), got);  // one averaged gradient, one update: the same bits
  ExpectClose(got, Fetch(*s1, names), 2e-3, names, 1e-3);
  EXPECT_EQ(Fetch(*s2, {two.loss_scale})[0][0], 512.f);
}

// A scale so large that the scaled gradients overflow (inputs of +-1000, so activations and
// weight gradients of thousands, times 2^127): steps are skipped, the scale halving each time,
// until the gradients fit; the variables stay as initialised until then.
TEST(MixedPrecisionTest, AnOverflowingScaleBacksOffUntilTheGradientsFit) {
  Model m(true);
  ops::MixedPrecisionGraph mp = Rewrite(m.graph(), {.compute = DType::kBF16,
                                                    .loss_scaling = Scaling::kDynamic,
                                                    .loss = m.loss,
                                                    .initial_scale = std::ldexp(1.0, 127)});
  ASSERT_NE(mp.graph, nullptr);
  std::vector<std::string> init = m.init;
  init.insert(init.end(), mp.init_targets.begin(), mp.init_targets.end());
  auto s = Start(*mp.graph, init);
  ASSERT_TRUE(s);
  const auto initial = Fetch(*s, m.variables);
  int skipped = 0;
  bool applied = false;
  for (int step = 0; step < 40 && !applied; ++step) {
    auto out = s->Run(Batch(step, 12, false, 1000), {mp.grads_finite, mp.loss_scale}, {m.step});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ((*out)[1].data<float>()[0], std::ldexp(1.f, 127 - skipped));
    applied = (*out)[0].data<bool>()[0];
    if (!applied) {
      ++skipped;
      EXPECT_EQ(Fetch(*s, m.variables), initial) << "after skipped step " << step;
    }
  }
  EXPECT_TRUE(applied);
  EXPECT_GE(skipped, 1);
  EXPECT_NE(Fetch(*s, m.variables), initial);
}

// f16's smallest step is 6e-8: gradients of a loss scaled by 1e-7 vanish in f16 products, so
// training without loss scaling leaves the first layer exactly as it was; with dynamic scaling
// the products see them 2^16 times larger and the update follows the f32 one.
TEST(MixedPrecisionTest, F16GradientsThatUnderflowSurviveLossScaling) {
  const double kTiny = 1e-7, kLr = 1e5;  // SGD by lr * 1e-7-sized gradients: steps of 1e-2
  const MlpOptions tiny{.loss_factor = kTiny, .lr = kLr};
  Model f32(false, tiny), bare(false, tiny), scaled(false, tiny);
  ops::MixedPrecisionGraph nb = Rewrite(bare.graph(), {.compute = DType::kF16});
  ops::MixedPrecisionGraph sb =
      Rewrite(scaled.graph(),
              {.compute = DType::kF16, .loss_scaling = Scaling::kDynamic, .loss = scaled.loss});
  ASSERT_TRUE(nb.graph && sb.graph);
  std::vector<std::string> init = scaled.init;
  init.insert(init.end(), sb.init_targets.begin(), sb.init_targets.end());
  auto sf = Start(f32.graph(), f32.init);
  auto sn = Start(*nb.graph, bare.init);
  auto ss = Start(*sb.graph, init);
  ASSERT_TRUE(sf && sn && ss);
  const auto w0 = Fetch(*sf, {"w0"})[0];
  Step(*sf, f32, Batch(0, 12));
  Step(*sn, bare, Batch(0, 12));
  Step(*ss, scaled, Batch(0, 12));
  const auto want = Fetch(*sf, {"w0"})[0], unscaled = Fetch(*sn, {"w0"})[0],
             got = Fetch(*ss, {"w0"})[0];
  double moved = 0, err = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    moved += std::abs(want[i] - w0[i]);
    err += std::abs(got[i] - want[i]);
  }
  ASSERT_GT(moved, 1e-3);  // the f32 step moves w0
  EXPECT_EQ(unscaled, w0) << "f16 without loss scaling: w0's gradient underflows to zero";
  EXPECT_LT(err, 0.05 * moved) << "with loss scaling the f16 step follows the f32 one";
}

TEST(MixedPrecisionTest, BadOptionsAndGraphsAreRefusedNamingWhat) {
  Model m(true);
  const Graph g = m.graph();
  auto bad = ops::MixedPrecision(g, {.compute = DType::kF32});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "bf16 or f16"));
  bad = ops::MixedPrecision(g, {.loss_scaling = Scaling::kDynamic});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "loss node"));
  bad = ops::MixedPrecision(g, {.loss_scaling = Scaling::kDynamic, .loss = "nope"});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kNotFound, "'nope'"));
  bad = ops::MixedPrecision(
      g, {.loss_scaling = Scaling::kDynamic, .loss = m.loss, .backoff_factor = 1.5});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "backoff_factor"));
  bad = ops::MixedPrecision(g,
                            {.loss_scaling = Scaling::kStatic, .loss = m.loss, .initial_scale = 0});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "initial_scale"));
  bad = ops::MixedPrecision(
      g, {.loss_scaling = Scaling::kDynamic, .loss = m.loss, .growth_interval = 0});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "growth_interval"));
  // A forward graph: its loss has no gradient seed to scale.
  Scope fwd = Scope::NewRootScope();
  auto x = ops::Placeholder(fwd.WithOpName("x"), DType::kF32, Shape{2, 3});
  ops::ReduceMean(fwd.WithOpName("mean"), ops::Mul(fwd, x, x));
  bad = ops::MixedPrecision(fwd.graph(), {.loss_scaling = Scaling::kStatic, .loss = "mean"});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "'mean' has no gradient seed"));
  // Scaling a graph twice.
  auto once = ops::MixedPrecision(g, {.loss_scaling = Scaling::kDynamic, .loss = m.loss});
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  bad = ops::MixedPrecision(*once->graph, {.loss_scaling = Scaling::kDynamic, .loss = m.loss});
  EXPECT_TRUE(Refused(bad.status(), StatusCode::kInvalidArgument, "mixed_precision/"));
}

}  // namespace
}  // namespace dflow
