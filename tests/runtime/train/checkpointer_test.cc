// Background checkpoints: snapshots that later steps leave alone, atomic files, the newest few
// kept, a damaged newest skipped on restore, and TrainLoop taking them every K steps.
#include "runtime/train/checkpointer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/train/trainer.h"
#include "serialization/checkpoint_file.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;

// A linear model trained by SGD: its one variable changes every step.
struct Model {
  Scope root = Scope::NewRootScope();
  std::string init, step, loss;
  Model() {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 4});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto w = ops::InitializedVariable(root.WithOpName("w"), Shape{4, 3},
                                      ops::Initializer::GlorotUniform(1));
    init = w.init.node_name();
    auto mean = ops::ReduceMean(
        root.WithOpName("loss"),
        ops::SparseSoftmaxCrossEntropyWithLogits(root, ops::MatMul(root, x, w.var), y).loss);
    loss = mean.name();
    step = ops::SGD({.learning_rate = 0.5}).Minimize(root, mean, {w.var}).name();
  }
};

Session::Feeds Batch(int seed) {
  std::mt19937 gen(seed);
  Tensor x(DType::kF32, Shape{8, 4}), y(DType::kI32, Shape{8});
  for (float& v : x.flat<float>()) v = std::uniform_real_distribution<float>(-1, 1)(gen);
  for (int i = 0; i < 8; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 3);
  return {{"x", x}, {"labels", y}};
}

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/checkpointer_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<float> W(Session& s) { return (*s.Run({}, {"w"}))[0].ToVector<float>(); }

TEST(CheckpointerTest, ASnapshotKeepsTheValuesOfItsStepWhileTrainingGoesOn) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  auto snapshot = (*session)->SnapshotVariables();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  const std::vector<float> before = W(**session);
  ASSERT_TRUE((*session)->Run(Batch(1), {}, {m.step}).ok());
  EXPECT_NE(W(**session), before);                         // the step moved w...
  EXPECT_EQ(snapshot->at("w").ToVector<float>(), before);  // ...but not the snapshot
}

TEST(CheckpointerTest, WritesInTheBackgroundKeepsTheNewestAndRestores) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("keep");
  auto ckpt = Checkpointer::Create({.dir = dir, .keep = 2});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::map<int64_t, std::vector<float>> at;
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE((*session)->Run(Batch(step), {}, {m.step}).ok());
    at[step] = W(**session);
    ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
    ASSERT_TRUE((*ckpt)->Flush().ok());
  }
  EXPECT_EQ((*ckpt)->written(), 5);
  auto files = Checkpointer::List(dir);
  ASSERT_EQ(files.size(), 2u);  // keep = 2: steps 5 and 4
  EXPECT_EQ(files[0].first, 5);
  EXPECT_EQ(files[1].first, 4);
  // Each file holds the variables of its step.
  for (const auto& [step, path] : files) {
    auto values = serialization::LoadCheckpoint(path);
    ASSERT_TRUE(values.ok()) << values.status().ToString();
    EXPECT_EQ(values->at("w").ToVector<float>(), at[step]) << path;
  }
  ASSERT_TRUE((*session)->Run(Batch(9), {}, {m.step}).ok());
  auto restored = Checkpointer::RestoreNewest(**session, dir);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 5);
  EXPECT_EQ(W(**session), at[5]);
}

// The spare files in `dir` (".spare-*": an old checkpoint the next one overwrites).
std::vector<std::string> Spares(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(".spare-")) out.push_back(e.path().string());
  }
  return out;
}

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(CheckpointerTest, TheCheckpointPastKeepIsOverwrittenByTheNextOne) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("spare");
  auto ckpt = Checkpointer::Create({.dir = dir, .keep = 2});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto save = [&](int64_t step) {
    ASSERT_TRUE((*session)->Run(Batch(static_cast<int>(step)), {}, {m.step}).ok());
    ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
    ASSERT_TRUE((*ckpt)->Flush().ok());
  };
  save(1);
  save(2);
  EXPECT_TRUE(Spares(dir).empty());  // nothing past keep yet
  save(3);
  auto spares = Spares(dir);
  ASSERT_EQ(spares.size(), 1u);  // step 1's file, renamed
  const ino_t spare = InodeOf(spares[0]);
  save(4);
  auto files = Checkpointer::List(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, 4);
  EXPECT_EQ(InodeOf(files[0].second), spare);  // written over the spare, not a new file
  ASSERT_EQ(Spares(dir).size(), 1u);           // step 2's, for step 5
  auto values = serialization::LoadCheckpoint(files[0].second);
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  EXPECT_EQ(values->at("w").ToVector<float>(), W(**session));
  ckpt->reset();
  EXPECT_TRUE(Spares(dir).empty());  // removed with the Checkpointer
  EXPECT_EQ(Checkpointer::List(dir).size(), 2u);
}

TEST(CheckpointerTest, SparesOfDeadProcessesAreRemovedOnCreate) {
  const std::string dir = FreshDir("orphans");
  std::filesystem::create_directories(dir);
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string orphan = fmt::format("{}/.spare-{}-0.tmp", dir, dead);
  const std::string live = fmt::format("{}/.spare-{}-99.tmp", dir, getpid());
  for (const auto& path : {orphan, live}) std::ofstream(path) << "old checkpoint";
  auto ckpt = Checkpointer::Create({.dir = dir});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(orphan));
  EXPECT_TRUE(std::filesystem::exists(live));  // a live process's (here: this one's)
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CheckpointerTest, TheNewestSyncedCheckpointStaysUntilANewerIsSynced) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("synced");
  // Only the first checkpoint is synced by the interval; Flush syncs the newest.
  auto ckpt = Checkpointer::Create({.dir = dir, .keep = 2, .sync_every = std::chrono::hours(1)});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  int64_t writes = 0;
  auto save = [&](int64_t step) {
    ASSERT_TRUE((*session)->Run(Batch(static_cast<int>(step)), {}, {m.step}).ok());
    ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
    // Written, not flushed (a flush would sync it).
    ++writes;
    for (int i = 0; i < 5000 && (*ckpt)->written() < writes; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ((*ckpt)->written(), writes);
  };
  for (int64_t step = 1; step <= 5; ++step) save(step);
  auto steps = [&] {
    std::vector<int64_t> out;
    for (const auto& [step, path] : Checkpointer::List(dir)) out.push_back(step);
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{5, 4, 1}));  // keep = 2, and step 1, synced
  EXPECT_EQ(ReadAll(dir + "/.synced"), boot + " 1\n");
  ASSERT_TRUE((*ckpt)->Flush().ok());
  EXPECT_EQ(ReadAll(dir + "/.synced"), boot + " 5\n");
  save(6);
  EXPECT_EQ(steps(), (std::vector<int64_t>{6, 5}));  // step 1 no longer needed
  const std::string mark = dir + "/.synced";
  const ino_t marked = InodeOf(mark);
  save(7);
  EXPECT_EQ(InodeOf(mark), marked);  // not synced: the mark stays
  // Rewound (as after a recovery): step 5 again replaces the file the mark vouches for, so it
  // is synced and the mark written anew.
  save(5);
  EXPECT_NE(InodeOf(mark), marked);
  EXPECT_EQ(ReadAll(mark), boot + " 5\n");
}

TEST(CheckpointerTest, AfterARebootCheckpointsNewerThanTheSyncedOneAreSkipped) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("reboot");
  std::map<int64_t, std::vector<float>> at;
  {
    auto ckpt = Checkpointer::Create({.dir = dir, .keep = 5});
    ASSERT_TRUE(ckpt.ok());
    for (int step = 1; step <= 4; ++step) {
      ASSERT_TRUE((*session)->Run(Batch(step), {}, {m.step}).ok());
      at[step] = W(**session);
      ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
      ASSERT_TRUE((*ckpt)->Flush().ok());
    }
  }
  // In this boot every file is trusted.
  auto restored = Checkpointer::RestoreNewest(**session, dir);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 4);
  // As if the machine had crashed after step 2 was synced and 3 and 4 were written unsynced.
  std::ofstream(dir + "/.synced") << "00000000-0000-0000-0000-000000000000 2\n";
  std::vector<std::string> skipped;
  restored = Checkpointer::RestoreNewest(**session, dir, &skipped);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 2);
  EXPECT_EQ(W(**session), at[2]);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("ckpt-4.dfckpt"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("restarted"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("ckpt-3.dfckpt"), std::string::npos) << skipped[1];
}

TEST(CheckpointerTest, ADamagedNewestCheckpointFallsBackToTheOneBefore) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("damaged");
  std::vector<float> at2;
  {
    auto ckpt = Checkpointer::Create({.dir = dir, .keep = 3});
    ASSERT_TRUE(ckpt.ok());
    for (int step = 1; step <= 3; ++step) {
      ASSERT_TRUE((*session)->Run(Batch(step), {}, {m.step}).ok());
      if (step == 2) at2 = W(**session);
      ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
      ASSERT_TRUE((*ckpt)->Flush().ok());
    }
  }
  // The newest cut short, as by a disk filling up under a copy of it.
  const std::string newest = Checkpointer::List(dir)[0].second;
  const auto size = std::filesystem::file_size(newest);
  std::filesystem::resize_file(newest, size / 2);
  std::vector<std::string> skipped;
  auto restored = Checkpointer::RestoreNewest(**session, dir, &skipped);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 2);
  EXPECT_EQ(W(**session), at2);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("ckpt-3.dfckpt"), std::string::npos) << skipped[0];
  // No checkpoint at all.
  auto none = Checkpointer::RestoreNewest(**session, FreshDir("none"));
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(none.status(), {"checkpointer_none"})) << none.status().ToString();
}

TEST(CheckpointerTest, ANewerSnapshotReplacesOneStillWaiting) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  const std::string dir = FreshDir("burst");
  auto ckpt = Checkpointer::Create({.dir = dir, .keep = 100});
  ASSERT_TRUE(ckpt.ok());
  for (int step = 1; step <= 50; ++step) ASSERT_TRUE((*ckpt)->Save(**session, step).ok());
  ASSERT_TRUE((*ckpt)->Flush().ok());
  // At most one write under way and one waiting at a time: some were replaced, the last never.
  EXPECT_LE((*ckpt)->written(), 50);
  EXPECT_EQ(Checkpointer::List(dir)[0].first, 50);
}

TEST(CheckpointerTest, ErrorsNameTheDirectoryOrTheVariable) {
  auto empty = Checkpointer::Create({.dir = ""});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto keep = Checkpointer::Create({.dir = FreshDir("k"), .keep = 0});
  EXPECT_TRUE(MessageHas(keep.status(), {"keep is 0"})) << keep.status().ToString();
  const std::string file = FreshDir("file");
  std::ofstream(file) << "not a directory";
  auto blocked = Checkpointer::Create({.dir = file + "/sub"});
  EXPECT_EQ(blocked.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(blocked.status(), {file + "/sub"})) << blocked.status().ToString();
  // A variable never initialised: Save says which.
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  auto ckpt = Checkpointer::Create({.dir = FreshDir("uninit")});
  ASSERT_TRUE(ckpt.ok());
  Status s = (*ckpt)->Save(**session, 7);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(s, {"checkpoint 7", "'w'"})) << s.ToString();
}

TEST(CheckpointerTest, TrainLoopCheckpointsEveryKStepsAndAtTheEnd) {
  Model m;
  auto session = Session::Create(m.root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {m.init}).ok());
  Dataset data;
  data.images = Tensor(DType::kF32, Shape{44, 4});
  data.labels = Tensor(DType::kI32, Shape{44});
  std::mt19937 gen(3);
  for (float& v : data.images.flat<float>()) v = std::uniform_real_distribution<float>(-1, 1)(gen);
  for (int i = 0; i < 44; ++i) data.labels.data<int32_t>()[i] = static_cast<int32_t>(gen() % 3);
  Batcher batches(data, 4, 1);  // 11 steps an epoch
  const std::string dir = FreshDir("loop");
  TrainLoopOptions o{.epochs = 2, .loss = m.loss, .train_target = m.step, .progress = false};
  o.checkpoint_dir = dir;
  o.checkpoint_every_steps = 5;
  o.checkpoint_keep = 10;
  int64_t taken = 0;
  Status s = TrainLoop(**session, batches, o, [&](const EpochStats& e) {
    taken = e.checkpoints;
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(taken, 4);  // steps 5, 10, 15, 20; then 22 at the end
  // The loop outruns the writer here (steps of microseconds), so some snapshots were replaced
  // while they waited; the last is always written.
  std::vector<int64_t> steps;
  for (const auto& [step, path] : Checkpointer::List(dir)) steps.push_back(step);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0], 22);
  for (int64_t step : steps) EXPECT_TRUE(step == 22 || step % 5 == 0) << step;
  // The last one holds the variables TrainLoop left.
  auto last = serialization::LoadCheckpoint(Checkpointer::List(dir)[0].second);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->at("w").ToVector<float>(), W(**session));
  // Checkpoints asked for without a period are an error naming the directory.
  o.checkpoint_every_steps = 0;
  Status none = TrainLoop(**session, batches, o, nullptr);
  EXPECT_TRUE(MessageHas(none, {dir, "checkpoint_every_steps"})) << none.ToString();
}

}  // namespace
}  // namespace dflow
