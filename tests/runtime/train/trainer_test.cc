// TrainLoop and Accuracy on a small separable problem; a non-finite loss stops training.
#include "runtime/train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "runtime/train/checkpointer.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

// Two classes: label 1 when feature 0 > feature 1.
Dataset Separable(int n) {
  Dataset d{Tensor(DType::kF32, Shape{n, 2}), Tensor(DType::kI32, Shape{n})};
  auto v = testing::RandomFloats(2 * n, 3, 0, 1);
  for (int i = 0; i < n; ++i) {
    d.images.data<float>()[2 * i] = v[2 * i];
    d.images.data<float>()[2 * i + 1] = v[2 * i + 1];
    d.labels.data<int32_t>()[i] = v[2 * i] > v[2 * i + 1];
  }
  return d;
}

struct Model {
  Scope root = Scope::NewRootScope();
  Output logits, loss;
  ops::Operation step;
  std::vector<std::string> init;

  explicit Model(double lr) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{2, 2},
                                      ops::Initializer::GlorotUniform(1));
    logits = ops::MatMul(root.WithOpName("logits"), x, w.var);
    loss = ops::ReduceMean(root.WithOpName("loss"),
                           ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
    ops::SGD sgd({.learning_rate = lr});
    step = sgd.Minimize(root, loss, {w.var});
    init = {w.init.node_name()};
  }
};

TEST(TrainerTest, LearnsASeparableProblem) {
  Dataset data = Separable(512);
  Model m(1.0);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  auto before = Accuracy(**s, data, "x", m.logits.name(), 100);
  ASSERT_TRUE(before.ok());
  Batcher batches(data, 32, 7);
  std::vector<EpochStats> seen;
  Status st = TrainLoop(
      **s, batches,
      {.epochs = 4, .loss = m.loss.name(), .train_target = m.step.name(), .progress = false},
      [&](const EpochStats& e) {
        seen.push_back(e);
        return Status::OK();
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].steps, 16);
  EXPECT_LT(seen[3].mean_loss, seen[0].mean_loss);
  auto after = Accuracy(**s, data, "x", m.logits.name(), 100);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(*after, 0.95);
}

TEST(TrainerTest, NonFiniteLossStopsWithEpochAndStep) {
  Dataset data = Separable(64);
  data.images.data<float>()[5] = std::nanf("");  // one bad pixel poisons the loss
  Model m(0.1);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  Batcher batches(data, 16, 1);
  Status st = TrainLoop(
      **s, batches,
      {.epochs = 3, .loss = m.loss.name(), .train_target = m.step.name(), .progress = false},
      nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(st, {"loss is", "epoch 1 step"}));
}

TEST(TrainerTest, StepErrorsComeBackUnchanged) {
  Dataset data = Separable(16);
  data.labels.data<int32_t>()[3] = 7;  // outside [0, 2)
  Model m(0.1);
  auto s = Session::Create(m.root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, m.init).ok());
  Batcher batches(data, 16, 1, /*shuffle=*/false);
  Status st =
      TrainLoop(**s, batches,
                {.loss = m.loss.name(), .train_target = m.step.name(), .progress = false}, nullptr);
  EXPECT_TRUE(MessageHas(st, {"SparseSoftmaxCrossEntropyWithLogits", "label 7 at row 3"}));
}

// Two replicas TrainLoop runs at once, each counting its steps in a variable of its own: replica
// 0 on cpu:0 does `matmuls[0]` 192x192 MatMuls per step (none by default), replica 1 on cpu:1
// `matmuls[1]` (ten).
struct UnevenReplicas {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> init;
  TrainLoopOptions::Replica replica[2];
  std::string extra_targets[2];  // run with each replica's step when set
  int matmuls[2] = {0, 10};      // each replica's work
  std::unique_ptr<Session> session;

  void Start() {
    for (int r = 0; r < 2; ++r) {
      const Scope on = root.WithDevice(fmt::format("cpu:{}", r));
      const std::string p = fmt::format("r{}_", r);
      auto x = ops::Placeholder(on.WithOpName(p + "x"), DType::kF32, Shape{-1, 2});
      auto y = ops::Placeholder(on.WithOpName(p + "labels"), DType::kI32, Shape{-1});
      auto count =
          ops::InitializedVariable(on.WithOpName(p + "count"), Shape{}, ops::Initializer::Zeros());
      init.push_back(count.init.node_name());
      Output loss =
          ops::Add(on, ops::ReduceMean(on, x), ops::Cast(on, ops::ReduceSum(on, y), DType::kF32));
      if (matmuls[r] > 0) {
        auto w = ops::InitializedVariable(on.WithOpName(p + "w"), Shape{192, 192},
                                          ops::Initializer::GlorotUniform(3));
        init.push_back(w.init.node_name());
        Output h = w.var;
        for (int i = 0; i < matmuls[r]; ++i) h = ops::MatMul(on, h, w.var);
        loss = ops::Add(on, loss, ops::Mul(on, ops::ReduceSum(on, h), ops::Const(on, 0.0f)));
      }
      loss = ops::Identity(on.WithOpName(p + "loss"), loss);
      std::vector<Output> after;
      if (!extra_targets[r].empty()) {
        after.push_back(root.OutputOf(*root.graph().FindNode(extra_targets[r])));
      }
      auto step = ops::Assign(on.WithOpName(p + "step").WithControlDependencies(after), count.var,
                              ops::Add(on, count.var, ops::Const(on, 1.0f)));
      replica[r] = {.images_feed = p + "x",
                    .labels_feed = p + "labels",
                    .loss = loss.name(),
                    .train_target = step.node_name()};
    }
    auto s = Session::Create(root, testing::Devices(2));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session = std::move(s).value();
    ASSERT_TRUE(session->Run({}, {}, init).ok());
  }

  // One epoch of `batches` batches of 16; each replica's steps.
  void Train(int max_staleness, EpochStats* stats, float counts[2],
             const std::string& checkpoint_dir = "", int batches = 64) {
    Dataset data = Separable(16 * batches);
    Batcher batcher(data, 16, 1);
    TrainLoopOptions o{.progress = false};
    o.replicas = {replica[0], replica[1]};
    o.max_staleness = max_staleness;
    if (!checkpoint_dir.empty()) {
      o.checkpoint_dir = checkpoint_dir;
      o.checkpoint_every_steps = 5;
    }
    Status st = TrainLoop(*session, batcher, o, [&](const EpochStats& e) {
      *stats = e;
      return Status::OK();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto c = session->Run({}, {"r0_count", "r1_count"});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    counts[0] = (*c)[0].data<float>()[0];
    counts[1] = (*c)[1].data<float>()[0];
  }
};

TEST(TrainerTest, AsynchronousReplicasRunAtTheirOwnPace) {
  UnevenReplicas uneven;
  uneven.matmuls[0] = 1;
  ASSERT_NO_FATAL_FAILURE(uneven.Start());
  EpochStats stats;
  float counts[2];
  // A MatMul a step for the fast replica and 256 batches: long enough that the slow replica's
  // thread gets going before the fast one has taken every batch on a loaded machine (with no
  // work and 64 batches, the fast one had taken them all 6 ms after the start).
  ASSERT_NO_FATAL_FAILURE(uneven.Train(-1, &stats, counts, "", 256));
  EXPECT_EQ(stats.steps, 256);
  EXPECT_EQ(counts[0] + counts[1], 256);
  EXPECT_EQ(stats.held, 0);
  // The fast replica takes most batches, and the slow one's steps miss its updates.
  EXPECT_GT(counts[0], counts[1] + 2) << counts[1];
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(stats.most_staleness, 2);
}

TEST(TrainerTest, BoundedStalenessHoldsTheFastReplica) {
  for (int bound : {0, 1}) {
    SCOPED_TRACE(fmt::format("max_staleness {}", bound));
    UnevenReplicas uneven;
    ASSERT_NO_FATAL_FAILURE(uneven.Start());
    EpochStats stats;
    float counts[2];
    const std::string dir = fmt::format("{}/trainer_bounded_{}", ::testing::TempDir(), bound);
    std::filesystem::remove_all(dir);
    ASSERT_NO_FATAL_FAILURE(uneven.Train(bound, &stats, counts, dir));
    EXPECT_EQ(counts[0] + counts[1], 64);
    EXPECT_LE(std::abs(counts[0] - counts[1]), bound + 1);
    EXPECT_GT(stats.held, 0);
    // While a step runs, the other replica ends at most 2 * bound + 1 of its own.
    EXPECT_LE(stats.most_staleness, 2 * bound + 1);
    EXPECT_GE(stats.checkpoints, 12);  // every 5 steps, each replica held while taken
    EXPECT_FALSE(Checkpointer::List(dir).empty());
  }
}

// Backup workers with the uneven replicas: each replica's step also writes its slot (replica r
// writes r + 1) and the update adds the weighted slots to a total and counts itself. With one
// backup of two, no step waits for the slow replica: the fast one is counted in nearly every
// step, and the slow one's late gradients are dropped.
TEST(TrainerTest, BackupWorkersDoNotWaitForTheSlowReplica) {
  UnevenReplicas uneven;
  uneven.matmuls[1] = 100;
  Scope& root = uneven.root;
  std::vector<Output> weighted;
  auto weights = ops::Placeholder(root.WithOpName("weights"), DType::kF32, Shape{2});
  for (int r = 0; r < 2; ++r) {
    const Scope on = root.WithDevice(fmt::format("cpu:{}", r));
    auto slot = ops::InitializedVariable(on.WithOpName(fmt::format("slot{}", r)), Shape{1},
                                         ops::Initializer::Zeros());
    uneven.init.push_back(slot.init.node_name());
    auto write = ops::Assign(on.WithOpName(fmt::format("write{}", r)), slot.var,
                             ops::Const(on, std::vector<float>{r + 1.0f}, Shape{1}));
    // The replica's target: its count and its slot.
    uneven.extra_targets[r] = write.node_name();
    weighted.push_back(ops::Mul(root, slot.var, ops::Slice(root, weights, {r}, {1})));
  }
  auto total =
      ops::InitializedVariable(root.WithOpName("total"), Shape{1}, ops::Initializer::Zeros());
  auto applies =
      ops::InitializedVariable(root.WithOpName("applies"), Shape{}, ops::Initializer::Zeros());
  uneven.init.insert(uneven.init.end(), {total.init.node_name(), applies.init.node_name()});
  auto add = ops::Assign(root, total.var, ops::Add(root, total.var, ops::AddN(root, weighted)));
  auto count = ops::Assign(root, applies.var, ops::Add(root, applies.var, ops::Const(root, 1.0f)));
  ops::NoOp(root.WithOpName("apply").WithControlDependencies({add, count}));
  ASSERT_NO_FATAL_FAILURE(uneven.Start());

  Dataset data = Separable(1024);
  Batcher batches(data, 16, 1);
  TrainLoopOptions o{.progress = false};
  o.replicas = {uneven.replica[0], uneven.replica[1]};
  o.backup_workers = 1;
  o.apply_target = "apply";
  o.weights_feed = "weights";
  EpochStats stats;
  Status st = TrainLoop(*uneven.session, batches, o, [&](const EpochStats& e) {
    stats = e;
    return Status::OK();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto got = uneven.session->Run({}, {"r0_count", "r1_count", "total", "applies"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const float c0 = (*got)[0].data<float>()[0], c1 = (*got)[1].data<float>()[0];
  const float sum = (*got)[2].data<float>()[0], steps = (*got)[3].data<float>()[0];
  EXPECT_EQ(steps, stats.steps);
  EXPECT_EQ(c0 + c1, stats.steps + stats.dropped);  // every replica step counted or dropped
  EXPECT_LE(c0 + c1, 64);
  EXPECT_GT(stats.dropped, 0);
  EXPECT_GT(c0, c1);
  EXPECT_LT(c1, steps / 2) << "the slow replica held the steps";
  // One replica counted a step, its slot weighted 1: the total is the steps plus the slow
  // replica's counted ones.
  EXPECT_GE(sum, steps);
  EXPECT_LE(sum, steps + c1);
}

TEST(TrainerTest, MisnamedReplicaOptionsAreRefusedBeforeTheFirstStep) {
  // Checked up front: a replica whose first step would only come after the others had done
  // the whole epoch must not let a misspelt name through.
  UnevenReplicas uneven;
  ASSERT_NO_FATAL_FAILURE(uneven.Start());
  Dataset data = Separable(512);
  Batcher batches(data, 16, 1);
  TrainLoopOptions o{.progress = false};
  o.replicas = {uneven.replica[0], uneven.replica[1]};
  o.replicas[1].train_target = "no_such_step";
  Status st = TrainLoop(*uneven.session, batches, o, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(st, {"replica 1's train_target", "no_such_step"})) << st.ToString();
  o.replicas[1] = uneven.replica[1];
  o.replicas[0].labels_feed = "no_such_labels";
  st = TrainLoop(*uneven.session, batches, o, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(st, {"replica 0's labels_feed", "no_such_labels"})) << st.ToString();
  o.replicas[0] = uneven.replica[0];
  o.replicas[1].loss = "";
  st = TrainLoop(*uneven.session, batches, o, nullptr);
  EXPECT_TRUE(MessageHas(st, {"replica 1 needs a loss"})) << st.ToString();
  o.replicas[1] = uneven.replica[1];
  o.backup_workers = 1;
  st = TrainLoop(*uneven.session, batches, o, nullptr);
  EXPECT_TRUE(MessageHas(st, {"1 backup workers", "apply_target"})) << st.ToString();
  TrainLoopOptions single{.loss = "r0_loss", .train_target = "r0_step", .progress = false};
  st = TrainLoop(*uneven.session, batches, single, nullptr);  // images_feed "x" by default
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(st, {"images_feed 'x'"})) << st.ToString();
}

TEST(TrainerTest, AReplicasFailureStopsTheOthersAndComesBack) {
  UnevenReplicas uneven;
  ASSERT_NO_FATAL_FAILURE(uneven.Start());
  Dataset data = Separable(512);
  Batcher batches(data, 16, 1);
  TrainLoopOptions o{.progress = false};
  o.replicas = {uneven.replica[0], uneven.replica[1]};
  // Replica 1 feeds replica 0's placeholder, so its first step fails at run time; staleness 1
  // holds replica 0 until then, so the failure comes whatever the threads' timing.
  o.replicas[1].images_feed = uneven.replica[0].images_feed;
  o.max_staleness = 1;
  Status st = TrainLoop(*uneven.session, batches, o, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(st, {"placeholder 'r1_x'", "must be fed"})) << st.ToString();
  auto counts = uneven.session->Run({}, {"r0_count", "r1_count"});
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_LE((*counts)[0].data<float>()[0], 2.0f);  // held at most one step ahead of none done
  EXPECT_EQ((*counts)[1].data<float>()[0], 0.0f);
  // The same session trains again with the right feeds: every batch stepped by one replica.
  o.replicas[1] = uneven.replica[1];
  int64_t steps = 0;
  st = TrainLoop(*uneven.session, batches, o, [&](const EpochStats& e) {
    steps = e.steps;
    return Status::OK();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(steps, 512 / 16);
}

}  // namespace
}  // namespace dflow
