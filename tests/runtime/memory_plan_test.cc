// Plan-time buffer assignment (runtime/memory_plan.h): the greedy placement never overlaps two
// buffers alive at once, reuses dead ones, and a planned training run computes exactly what an
// unplanned one does while its outputs come from the arena.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::RandomFloats;

TEST(MemoryPatternTest, DeadBuffersAreReusedAndEscapedOnesLeftOut) {
  // a [0, 2), b [1, 3), c [2, 4) overlaps only b: c takes a's place. d outlived the run. e's slot
  // was allocated twice.
  MemoryPattern p = MakeMemoryPattern({{0, 100, 0, 2},
                                       {1, 100, 1, 3},
                                       {2, 90, 2, 4},
                                       {3, 1000, 3, -1},
                                       {4, 10, 5, 6},
                                       {4, 10, 7, 8}});
  ASSERT_EQ(p.slots.size(), 3u);
  EXPECT_EQ(p.slots.at(0).offset, 0u);
  EXPECT_EQ(p.slots.at(1).offset, 128u);
  EXPECT_EQ(p.slots.at(2).offset, 0u);
  EXPECT_EQ(p.arena_bytes, 256u);
  EXPECT_EQ(p.sum_bytes, 384u);
}

// A buffer a Send handed to another device is freed when that device is done with it, which
// varies between runs: the recorder leaves it out of the plan, and keeps its neighbour.
TEST(MemoryPatternTest, BuffersSharedWithAnotherDeviceAreNotPlanned) {
  MemoryPattern p = MakeMemoryPattern({{0, 100, 0, 2}, {1, 100, 1, 3, /*shared=*/true}});
  ASSERT_EQ(p.slots.size(), 1u);
  EXPECT_TRUE(p.slots.contains(0));

  auto recorder = MakeAllocator<AllocationRecorder>(CpuAllocator::Default());
  std::vector<Tensor> kept;
  for (int slot = 0; slot < 3; ++slot) {
    ASSERT_EQ(recorder->ForOutput(slot, 64), recorder.get());
    auto t = Tensor::Allocate(recorder.get(), DType::kF32, Shape{16});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    kept.push_back(std::move(t).value());
  }
  recorder->MarkShared(kept[1].Part(8, Shape{4}));  // a view inside slot 1's buffer
  recorder->MarkShared(Tensor::FromVector<float>({1, 2}, Shape{2}));  // not recorded: ignored
  kept.clear();
  MemoryPattern recorded = recorder->Finish();
  EXPECT_EQ(recorded.slots.size(), 2u);
  EXPECT_TRUE(recorded.slots.contains(0));
  EXPECT_FALSE(recorded.slots.contains(1));
  EXPECT_TRUE(recorded.slots.contains(2));
}

// A run whose order differs from the recorded one: a slot whose planned place is still held
// takes the first free range of the arena that fits, and only when none does the device's
// memory; every buffer given out is distinct and the arena's free ranges come back.
TEST(ArenaAllocatorTest, AClashTakesAnotherFreeRangeBeforeTheDevice) {
  auto pattern = std::make_shared<MemoryPattern>();
  pattern->slots = {{0, {0, 100}}, {1, {0, 100}}, {2, {128, 100}}, {3, {0, 200}}};
  pattern->arena_bytes = 256;
  AllocatorPtr<ArenaAllocator> arena(
      static_cast<ArenaAllocator*>(ArenaAllocator::Create(CpuAllocator::Default(), pattern)));
  ASSERT_NE(arena, nullptr);
  auto allocate = [&](int slot, size_t bytes) -> Tensor {
    Allocator* a = arena->ForOutput(slot, bytes);
    auto t = Tensor::Allocate(a != nullptr ? a : CpuAllocator::Default(), DType::kU8,
                              Shape{static_cast<int64_t>(bytes)});
    EXPECT_TRUE(t.ok());
    return std::move(t).value();
  };
  Tensor a = allocate(0, 100);  // its planned place, offset 0
  Tensor b = allocate(1, 100);  // planned at 0 too (recorded after a was freed): moves to 128
  EXPECT_EQ(static_cast<char*>(b.raw_data()) - static_cast<char*>(a.raw_data()), 128);
  Tensor c = allocate(2, 100);  // the arena is full: the device
  EXPECT_EQ(arena->planned(), 2);
  EXPECT_EQ(arena->fallbacks(), 1);
  EXPECT_EQ(arena->live(), 2);
  a = Tensor();
  Tensor d = allocate(3, 80);  // another size than planned: the free range at 0
  EXPECT_EQ(d.raw_data(), static_cast<char*>(b.raw_data()) - 128);
  EXPECT_EQ(arena->planned(), 3);
  b = Tensor();
  c = Tensor();
  d = Tensor();
  EXPECT_EQ(arena->live(), 0);
}

// Property: across random lifetimes, buffers alive at the same time never share bytes.
TEST(MemoryPatternTest, RandomLifetimesNeverOverlap) {
  std::mt19937 gen(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<RecordedBuffer> bufs;
    for (int i = 0; i < 200; ++i) {
      int64_t from = gen() % 400, len = 1 + gen() % 60;
      bufs.push_back({i, 1 + gen() % 5000, from, from + len});
    }
    MemoryPattern p = MakeMemoryPattern(bufs);
    ASSERT_EQ(p.slots.size(), bufs.size());
    EXPECT_LE(p.arena_bytes, p.sum_bytes);
    for (const auto& a : bufs) {
      const auto& sa = p.slots.at(a.slot);
      EXPECT_LE(sa.offset + a.bytes, p.arena_bytes);
      for (const auto& b : bufs) {
        if (a.slot >= b.slot || !(a.allocated < b.freed && b.allocated < a.freed)) continue;
        const auto& sb = p.slots.at(b.slot);
        ASSERT_TRUE(sa.offset + a.bytes <= sb.offset || sb.offset + b.bytes <= sa.offset)
            << "round " << round << ": slots " << a.slot << " and " << b.slot;
      }
    }
  }
}

struct Mlp {
  Scope root = Scope::NewRootScope();
  std::vector<ops::VariableAndInit> vars;
  std::string loss, step, w1;
  std::vector<std::string> inits;

  Mlp() {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 20});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto layer = [&](const std::string& name, Output in, int64_t n_in, int64_t n_out, bool relu) {
      auto w = ops::InitializedVariable(root.WithOpName(name + "_w"), Shape{n_in, n_out},
                                        ops::Initializer::GlorotUniform(n_out));
      auto b = ops::InitializedVariable(root.WithOpName(name + "_b"), Shape{n_out},
                                        ops::Initializer::Zeros());
      vars.push_back(w);
      vars.push_back(b);
      Output y = ops::BiasAdd(root, ops::MatMul(root, in, w.var), b.var);
      return relu ? ops::Relu(root, y) : y;
    };
    auto h = layer("l1", x, 20, 64, true);
    h = layer("l2", h, 64, 64, true);
    auto logits = layer("l3", h, 64, 5, false);
    auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
    Output loss_out = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
    loss = loss_out.name();
    ops::SGD sgd({.learning_rate = 0.1});
    std::vector<Output> vs;
    for (const auto& v : vars) {
      vs.push_back(v.var);
      inits.push_back(v.init.node_name());
    }
    step = sgd.Minimize(root, loss_out, vs).name();
    w1 = vars[0].var.name();
  }
};

Session::Feeds Batch(int64_t n, uint32_t seed) {
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((i * 7 + seed) % 5);
  return {{"x", Tensor::FromVector(RandomFloats(n * 20, seed, -1, 1), Shape{n, 20})},
          {"labels", Tensor::FromVector(labels, Shape{n})}};
}

TEST(MemoryPlanTest, PlannedTrainingMatchesUnplannedAndUsesTheArena) {
  std::vector<std::vector<float>> losses(2), weights(2);
  std::vector<StepStats> stats(2);
  for (int planned = 0; planned < 2; ++planned) {
    Mlp m;
    ASSERT_TRUE(m.root.ok()) << m.root.status().ToString();
    SessionOptions options;
    options.plan_memory = planned == 1;
    auto session = Session::Create(m.root, options);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    ASSERT_TRUE((*session)->Run({}, {}, m.inits).ok());
    std::vector<Tensor> held;
    for (int step = 0; step < 6; ++step) {
      // The last batch is smaller, as at the end of an epoch: a second signature.
      auto out = (*session)->Run(Batch(step == 5 ? 9 : 32, step), {m.loss}, {m.step});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      losses[planned].push_back(out->at(0).data<float>()[0]);
      held.push_back(out->at(0));  // fetched tensors must survive later runs
      for (int i = 0; i < step; ++i) {
        EXPECT_EQ(held[i].data<float>()[0], losses[planned][i]) << "held loss " << i;
      }
      if (step == 4) stats[planned] = (*session)->last_step_stats();
    }
    auto w = (*session)->Run({}, {m.w1});
    ASSERT_TRUE(w.ok());
    weights[planned] = w->at(0).ToVector<float>();
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-6) << i;
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < weights[0].size(); ++i) EXPECT_NEAR(weights[0][i], weights[1][i], 1e-6);

  const PlanMemoryStats& off = stats[0].memory;
  EXPECT_EQ(off.patterns, 0);
  EXPECT_EQ(off.planned, 0);
  const PlanMemoryStats& on = stats[1].memory;
  EXPECT_EQ(on.patterns, 1);  // the batch-32 signature, recorded on the first step
  EXPECT_GT(on.planned, 10);
  EXPECT_EQ(on.fallbacks, 0);
  EXPECT_GT(on.arena_bytes, 0u);
  EXPECT_LT(on.arena_bytes, on.unplanned_sum);  // dead buffers were reused
  // Variables alone take (20*64 + 64 + 64*64 + 64 + 64*5 + 5) floats.
  size_t variable_bytes = (20 * 64 + 64 + 64 * 64 + 64 + 64 * 5 + 5) * 4;
  EXPECT_GT(stats[1].peak_bytes, variable_bytes + on.arena_bytes);
  EXPECT_GT(stats[0].peak_bytes, variable_bytes);
}

}  // namespace
}  // namespace dflow
