// The data-parallel rewrite: N replicas on in-process devices against the single replica trained
// on the whole batch, step by step, with SGD and Adam.
#include "rewrite/replicate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "rewrite/replicate_fixture.h"
#include "runtime/session.h"
#include "runtime/train/trainer.h"
#include "serialization/checkpoint_file.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::Devices;
using testing::MessageHas;

// The variables of `model` in `many` (replica 0's, or the servers') equal the single replica's
// in `one` within rounding.
void ExpectTheSameVariables(Session& one, const Mlp& single, Session& many, const Mlp& model) {
  auto want = one.Run({}, single.variables);
  auto got = many.Run({}, model.variables);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  for (size_t v = 0; v < model.variables.size(); ++v) {
    auto w = (*want)[v].ToVector<float>(), g = (*got)[v].ToVector<float>();
    ASSERT_EQ(w.size(), g.size()) << model.variables[v];
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i]))
          << model.variables[v] << "[" << i << "]";
    }
  }
}

void TrainAgainstOneReplica(int replicas, bool adam, int64_t first_bucket_bytes,
                            int parameter_servers = 0, int64_t max_variable_bytes = 0,
                            const std::vector<std::string>& hosts = {},
                            int64_t own_all_reduce_bytes = 256 << 10) {
  SCOPED_TRACE(fmt::format("{} replicas, {}, {} parameter servers, variables split over {} bytes",
                           replicas, adam ? "Adam" : "SGD", parameter_servers, max_variable_bytes));
  Mlp single(adam), model(adam);
  ops::ReplicateOptions options;
  for (int r = 0; r < replicas; ++r) options.devices.push_back(fmt::format("cpu:{}", r));
  for (int p = 0; p < parameter_servers; ++p) {
    options.parameter_servers.push_back(fmt::format("cpu:{}", replicas + p));
  }
  options.averaged = {model.loss};
  options.first_bucket_bytes = first_bucket_bytes;
  options.max_variable_bytes = max_variable_bytes;
  options.hosts = hosts;
  options.own_all_reduce_bytes = own_all_reduce_bytes;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  // Four gradients of under 2 KiB: one bucket, or two after a first bucket of 64 bytes (no
  // all-reduce with parameter servers).
  // With own_all_reduce_bytes of 256: w0 (512 bytes) and w1 (256) alone, the biases between
  // them in buckets of their own.
  const int buckets = own_all_reduce_bytes == 256 ? 4 : first_bucket_bytes < 1024 ? 2 : 1;
  EXPECT_EQ(replicated->buckets, parameter_servers > 0 ? 0 : buckets);

  auto one = Session::Create(single.root);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto many = Session::Create(*replicated->graph, Devices(replicas + parameter_servers));
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
  // The initializers' names run every replica's; the copies start equal.
  auto init = (*many)->Run({}, {}, model.init);
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  for (int step = 0; step < 8; ++step) {
    Session::Feeds feeds = Batch(step, 12);  // divides by 2, 3 and 4
    auto a = (*one)->Run(feeds, {single.loss}, {single.step});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = (*many)->Run(feeds, {model.loss}, {model.step});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const float la = (*a)[0].data<float>()[0], lb = (*b)[0].data<float>()[0];
    EXPECT_NEAR(lb, la, 1e-5 * std::abs(la)) << "step " << step;
  }
  // Every replica's variables: equal to each other exactly (one all-reduced gradient, one
  // update), and to the single replica's within rounding.
  std::vector<std::string> fetches = single.variables;
  auto want = (*one)->Run({}, fetches);
  ASSERT_TRUE(want.ok());
  for (int r = 0; r < (parameter_servers > 0 ? 1 : replicas); ++r) {
    std::vector<std::string> names;
    for (const auto& v : model.variables) {
      names.push_back(r == 0 ? v : fmt::format("replica{}/{}", r, v));
    }
    auto got = (*many)->Run({}, names);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (size_t v = 0; v < names.size(); ++v) {
      auto w = (*want)[v].ToVector<float>(), g = (*got)[v].ToVector<float>();
      ASSERT_EQ(w.size(), g.size());
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << names[v] << "[" << i << "]";
      }
      if (r > 0) {
        auto first = (*many)->Run({}, {model.variables[v]});
        ASSERT_TRUE(first.ok());
        EXPECT_EQ((*first)[0].ToVector<float>(), g) << names[v];
      }
    }
  }
}

TEST(ReplicateTest, TwoAndFourReplicasFollowTheSingleReplicaWithSgd) {
  TrainAgainstOneReplica(2, false, 1 << 20);
  TrainAgainstOneReplica(4, false, 1 << 20);
}

// Synchronous parameter servers give what the all-reduce gives: the single replica's training.
TEST(ReplicateTest, ParameterServersFollowTheSingleReplica) {
  TrainAgainstOneReplica(2, false, 1 << 20, 1);
  TrainAgainstOneReplica(3, true, 1 << 20, 2);
}

// Variables spread over the servers by bytes, largest first, each to the least loaded.
TEST(ReplicateTest, VariablesGoToTheLeastLoadedServer) {
  Mlp model(false);  // w0 512 bytes, w1 256, b0 64, b1 16
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.parameter_servers = {"cpu:2", "cpu:3"};
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  auto device = [&](const std::string& name) {
    return replicated->graph->node(*replicated->graph->FindNode(name)).requested_device();
  };
  EXPECT_EQ(device("w0"), "/device:CPU:2");
  EXPECT_EQ(device("w1"), "/device:CPU:3");
  EXPECT_EQ(device("b0"), "/device:CPU:3");
  EXPECT_EQ(device("b1"), "/device:CPU:3");
  EXPECT_FALSE(replicated->graph->FindNode("replica1/w0").has_value());  // kept once
  EXPECT_TRUE(replicated->sync_target.empty());
}

// Asynchronous parameter servers: each replica applies its own gradient in its own step, to
// the one copy of the variables and Adam's state; steps of replicas 0, 1, 1, 0, ... one after
// another are the single replica's steps on the same batches.
TEST(ReplicateTest, AsynchronousReplicasApplyTheirOwnGradientsToTheServersVariables) {
  Mlp single(true), model(true);
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.parameter_servers = {"cpu:2"};
  options.averaged = {model.loss};
  options.mode = ops::ReplicateOptions::Mode::kAsync;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  EXPECT_TRUE(replicated->asynchronous);
  EXPECT_EQ(replicated->replicas, 2);
  EXPECT_EQ(replicated->max_staleness, -1);
  const Graph& g = *replicated->graph;
  EXPECT_FALSE(g.FindNode("x/replica_split").has_value());  // each replica fed its own batch
  ASSERT_TRUE(g.FindNode("replica1/x").has_value());
  EXPECT_EQ(g.node(*g.FindNode("replica1/x")).requested_device(), "/device:CPU:1");
  EXPECT_FALSE(g.FindNode("replica1/w0").has_value());  // the variables are kept once
  // Every replica's update runs on the server.
  int updates = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (node.op() != "ApplyAdam") continue;
    ++updates;
    EXPECT_EQ(node.requested_device(), "/device:CPU:2") << node.name();
  }
  EXPECT_EQ(updates, 8);  // four variables, two replicas

  auto one = Session::Create(single.root);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto many = Session::Create(g, Devices(3));
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
  ASSERT_TRUE((*many)->Run({}, {}, model.init).ok());
  const int order[] = {0, 1, 1, 0, 1, 0, 0};
  for (int step = 0; step < 7; ++step) {
    const int r = order[step];
    Session::Feeds feeds = Batch(step, 6), own;
    for (const auto& [name, value] : feeds) own.emplace_back(ops::ReplicaName(name, r), value);
    auto a = (*one)->Run(feeds, {single.loss}, {single.step});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b =
        (*many)->Run(own, {ops::ReplicaName(model.loss, r)}, {ops::ReplicaName(model.step, r)});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const float la = (*a)[0].data<float>()[0], lb = (*b)[0].data<float>()[0];
    EXPECT_NEAR(lb, la, 1e-5 * std::abs(la)) << "step " << step << ", replica " << r;
  }
  ExpectTheSameVariables(**one, single, **many, model);
}

// Backup workers: each replica leaves its gradients in slots on the server, and the update
// applies their weighted sum. Weights {1, 0} are replica 0's step alone; {1/2, 1/2} the
// synchronous step on both replicas' batches.
TEST(ReplicateTest, BackupWorkersUpdateWithTheWeightedGradientsOfTheReplicasCounted) {
  Mlp single(true), model(true);
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.parameter_servers = {"cpu:2"};
  options.backup_workers = 1;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  EXPECT_EQ(replicated->backup_workers, 1);
  ASSERT_EQ(replicated->replica_targets.size(), 2u);
  EXPECT_FALSE(replicated->apply_target.empty());
  auto one = Session::Create(single.root);
  auto many = Session::Create(*replicated->graph, Devices(3));
  ASSERT_TRUE(one.ok() && many.ok());
  ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
  ASSERT_TRUE((*many)->Run({}, {}, model.init).ok());
  auto slots = (*many)->Run({}, {}, {replicated->init_target});
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  auto own = [](const Session::Feeds& feeds, int r) {
    Session::Feeds out;
    for (const auto& [name, value] : feeds) out.emplace_back(ops::ReplicaName(name, r), value);
    return out;
  };
  auto weights = [](float a, float b) {
    Tensor w(DType::kF32, Shape{2});
    w.data<float>()[0] = a;
    w.data<float>()[1] = b;
    return w;
  };
  for (int step = 0; step < 4; ++step) {
    const Session::Feeds a = Batch(2 * step, 6), b = Batch(2 * step + 1, 6);
    for (int r = 0; r < 2; ++r) {
      auto ran = (*many)->Run(own(r == 0 ? a : b, r), {ops::ReplicaName(model.loss, r)},
                              {replicated->replica_targets[r]});
      ASSERT_TRUE(ran.ok()) << ran.status().ToString();
    }
    const bool both = step % 2 == 1;
    auto applied =
        (*many)->Run({{replicated->weights_feed, both ? weights(0.5, 0.5) : weights(1, 0)}}, {},
                     {replicated->apply_target});
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
    // The single replica: replica 0's batch, or both batches as one.
    Session::Feeds whole = a;
    if (both) {
      for (int f = 0; f < 2; ++f) {
        const Tensor& x = a[f].second;
        const Tensor& y = b[f].second;
        std::vector<int64_t> dims = x.shape().dim_vector();
        dims[0] *= 2;
        Tensor joined(x.dtype(), Shape(dims));
        std::memcpy(joined.raw_data(), x.raw_data(), x.num_bytes());
        std::memcpy(static_cast<char*>(joined.raw_data()) + x.num_bytes(), y.raw_data(),
                    y.num_bytes());
        whole[f].second = joined;
      }
    }
    ASSERT_TRUE((*one)->Run(whole, {}, {single.step}).ok());
  }
  ExpectTheSameVariables(**one, single, **many, model);
}

TEST(ReplicateTest, BoundedStalenessGivesTheBoundForTrainLoop) {
  Mlp model(false);
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.parameter_servers = {"cpu:2"};
  options.mode = ops::ReplicateOptions::Mode::kBoundedStaleness;
  options.staleness = 3;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  EXPECT_TRUE(replicated->asynchronous);
  EXPECT_EQ(replicated->max_staleness, 3);
  EXPECT_TRUE(replicated->graph->FindNode(ops::ReplicaName(model.step, 1)).has_value());
}

// Variables split into row blocks over two servers: w0 (with Adam's m and v, 1544 bytes) in three
// blocks, w1 (776 bytes) in two, the biases whole; training still follows the single replica.
TEST(ReplicateTest, BigVariablesSplitIntoRowBlocksOverTheServers) {
  TrainAgainstOneReplica(2, true, 1 << 20, 2, 600);
  TrainAgainstOneReplica(2, false, 1 << 20, 2, 300);
  Mlp model(true);
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.parameter_servers = {"cpu:2", "cpu:3"};
  options.max_variable_bytes = 600;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  EXPECT_EQ(replicated->split_variables, (std::map<std::string, int>{{"w0", 3},
                                                                     {"w0/update/m", 3},
                                                                     {"w0/update/v", 3},
                                                                     {"w1", 2},
                                                                     {"w1/update/m", 2},
                                                                     {"w1/update/v", 2}}));
  const Graph& g = *replicated->graph;
  std::set<std::string> servers;
  for (int b = 0; b < 3; ++b) {
    auto part = g.FindNode(fmt::format("w0/part{}", b));
    ASSERT_TRUE(part.has_value()) << b;
    servers.insert(g.node(*part).requested_device());
  }
  EXPECT_EQ(servers.size(), 2u);  // w0's blocks on both servers
  // Each replica joins the blocks itself.
  ASSERT_TRUE(g.FindNode("replica1/w0").has_value());
  EXPECT_EQ(g.node(*g.FindNode("replica1/w0")).requested_device(), "/device:CPU:1");
  // One server: nothing to share, nothing split.
  options.parameter_servers = {"cpu:2"};
  auto one = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(one->split_variables.empty());
}

// Four replicas on two hosts: each host sums first, then the hosts' ring.
TEST(ReplicateTest, ReplicasOnTwoHostsFollowTheSingleReplica) {
  TrainAgainstOneReplica(4, true, 1 << 20, 0, 0, {"a", "a", "b", "b"});
  TrainAgainstOneReplica(3, false, 64, 0, 0, {"a", "b", "b"});
}

TEST(ReplicateTest, ReplicasFollowTheSingleReplicaWithAdamAndManyBuckets) {
  // A first bucket of 64 bytes: b1's gradient alone, then the rest.
  TrainAgainstOneReplica(2, true, 64);
  // Big gradients all-reduced alone.
  TrainAgainstOneReplica(3, true, 1 << 20, 0, 0, {}, 256);
  TrainAgainstOneReplica(3, true, 1 << 20);
}

// The SGD model as two replicas on cpu:0 and cpu:1, initialised.
struct TwoReplicas {
  Mlp model{false};
  ops::ReplicatedGraph replicated;
  std::unique_ptr<Session> session;
  void Start() {
    ops::ReplicateOptions options;
    options.devices = {"cpu:0", "cpu:1"};
    auto r = ops::Replicate(model.root.graph(), options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    replicated = *r;
    auto s = Session::Create(*replicated.graph, Devices(2));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session = std::move(s).value();
    ASSERT_TRUE(session->Run({}, {}, model.init).ok());
  }
};

// Fed shards: each replica's share of the batch fed under its own name (TrainLoop cuts the
// batches) trains as the whole batch does in the single replica.
TEST(ReplicateTest, ReplicasFedTheirSharesFollowTheSingleReplica) {
  Mlp single(true), model(true);
  ops::ReplicateOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.averaged = {model.loss};
  options.feed_shards = true;
  auto replicated = ops::Replicate(model.root.graph(), options);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  EXPECT_FALSE(replicated->graph->FindNode("x/replica_split").has_value());
  ASSERT_TRUE(replicated->graph->FindNode("replica1/labels").has_value());
  auto one = Session::Create(single.root);
  auto many = Session::Create(*replicated->graph, Devices(2));
  ASSERT_TRUE(one.ok() && many.ok());
  ASSERT_TRUE((*one)->Run({}, {}, single.init).ok());
  ASSERT_TRUE((*many)->Run({}, {}, model.init).ok());
  Session::Feeds all = Batch(0, 64);
  Dataset data{all[0].second, all[1].second};
  TrainLoopOptions whole{
      .epochs = 2, .loss = single.loss, .train_target = single.step, .progress = false};
  TrainLoopOptions shards{.epochs = 2,
                          .loss = model.loss,
                          .train_target = model.step,
                          .feed_shards = 2,
                          .progress = false};
  Batcher a(data, 8, 3), b(data, 8, 3);
  ASSERT_TRUE(TrainLoop(**one, a, whole, nullptr).ok());
  Status trained = TrainLoop(**many, b, shards, nullptr);
  ASSERT_TRUE(trained.ok()) << trained.ToString();
  ExpectTheSameVariables(**one, single, **many, model);
  // A batch that does not cut into the shards names the rows and the feed.
  Batcher odd(data, 7, 3);
  Status uneven = TrainLoop(**many, odd, shards, nullptr);
  EXPECT_TRUE(MessageHas(uneven, {"a batch of 7 rows of 'x'", "2 shards"})) << uneven.ToString();
}

TEST(ReplicateTest, SyncCopiesReplicaZerosVariablesToTheOthers) {
  TwoReplicas two;
  ASSERT_NO_FATAL_FAILURE(two.Start());
  Session* session = two.session.get();
  const Mlp& model = two.model;
  // Replica 0's copy of the step alone: its variables move, replica 1's stay; the sync then
  // copies replica 0's to replica 1.
  auto alone = session->Run(Batch(0, 4), {}, {"replica0/" + model.step});
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  auto before = session->Run({}, {"w0", "replica1/w0"});
  ASSERT_TRUE(before.ok());
  EXPECT_NE((*before)[0].ToVector<float>(), (*before)[1].ToVector<float>());
  ASSERT_TRUE(session->Run({}, {}, {two.replicated.sync_target}).ok());
  auto after = session->Run({}, {"w0", "replica1/w0"});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)[0].ToVector<float>(), (*after)[1].ToVector<float>());
  EXPECT_EQ((*after)[0].ToVector<float>(), (*before)[0].ToVector<float>());
}

// The replicas' copies of a variable mirror replica 0's: a checkpoint holds each variable once,
// as the single-replica graph's does, and restores into one replica, two or three, setting
// every copy.
TEST(ReplicateTest, ACheckpointHoldsMirroredVariablesOnceAndRestoresIntoAnyReplicaCount) {
  Mlp single(true);
  auto replicated = [&](int n) {
    Mlp model(true);
    ops::ReplicateOptions options;
    options.devices.clear();
    for (int d = 0; d < n; ++d) options.devices.push_back(fmt::format("cpu:{}", d));
    options.averaged = {model.loss};
    auto r = ops::Replicate(model.root.graph(), options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::make_pair(std::move(model), r.ok() ? r->graph : nullptr);
  };
  auto [two_model, two_graph] = replicated(2);
  ASSERT_NE(two_graph, nullptr);
  const Node& mirror = two_graph->node(*two_graph->FindNode("replica1/w0"));
  EXPECT_EQ(mirror.GetAttr<std::string>("mirror_of").value(), "w0");
  auto two = Session::Create(*two_graph, Devices(2));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_TRUE((*two)->Run({}, {}, two_model.init).ok());
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE((*two)->Run(Batch(step, 8), {}, {two_model.step}).ok());
  }
  const std::string path = ::testing::TempDir() + "/replicate_mirrors.dfckpt";
  ASSERT_TRUE((*two)->SaveCheckpoint(path).ok());
  auto saved = serialization::LoadCheckpoint(path);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  std::set<std::string> in_file, of_single;
  for (const auto& [name, value] : *saved) in_file.insert(name);
  for (int v = 0; v < single.root.graph().num_nodes(); ++v) {
    const Node& node = single.root.graph().node(v);
    if (node.role() == OpRole::kVariable) of_single.insert(node.name());
  }
  EXPECT_EQ(in_file, of_single);  // weights and Adam's state, once each

  auto one = Session::Create(single.root);
  ASSERT_TRUE(one.ok());
  Status restored_one = (*one)->RestoreCheckpoint(path);
  ASSERT_TRUE(restored_one.ok()) << restored_one.ToString();
  auto [three_model, three_graph] = replicated(3);
  ASSERT_NE(three_graph, nullptr);
  auto three = Session::Create(*three_graph, Devices(3));
  ASSERT_TRUE(three.ok());
  Status restored = (*three)->RestoreCheckpoint(path);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  for (const std::string& v : single.variables) {
    auto copies = (*three)->Run({}, {v, "replica1/" + v, "replica2/" + v});
    ASSERT_TRUE(copies.ok()) << copies.status().ToString();
    for (const Tensor& copy : *copies) {
      EXPECT_EQ(copy.ToVector<float>(), saved->at(v).ToVector<float>()) << v;
    }
  }
  // The three replicas train on as the one replica does from the same checkpoint.
  auto a = (*three)->Run(Batch(5, 12), {three_model.loss}, {three_model.step});
  auto b = (*one)->Run(Batch(5, 12), {single.loss}, {single.step});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR((*a)[0].data<float>()[0], (*b)[0].data<float>()[0], 1e-5f);
}

TEST(ReplicateTest, ABatchThatDoesNotDivideNamesTheSplit) {
  TwoReplicas two;
  ASSERT_NO_FATAL_FAILURE(two.Start());
  Session* session = two.session.get();
  const Mlp& model = two.model;
  auto r = session->Run(Batch(0, 5), {}, {model.step});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(MessageHas(r.status(), {"/replica_split", "does not split into 2"}))
      << r.status().ToString();
}

TEST(ReplicateTest, BadOptionsAreErrorsNamingWhatIsWrong) {
  Mlp model(false);
  ops::ReplicateOptions options;
  auto none = ops::Replicate(model.root.graph(), options);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(none.status(), {"no devices"})) << none.status().ToString();
  options.devices = {"cpu:0", "cpu:1"};
  options.averaged = {"no_such_loss"};
  auto missing = ops::Replicate(model.root.graph(), options);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"'no_such_loss'"})) << missing.status().ToString();
  options.averaged = {"labels"};
  auto integer = ops::Replicate(model.root.graph(), options);
  EXPECT_EQ(integer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(integer.status(), {"'labels'", "f32 or f64"}))
      << integer.status().ToString();
  options.averaged = {};
  options.bucket_bytes = 0;
  options.hosts = {"a"};
  auto hosts = ops::Replicate(model.root.graph(), options);
  EXPECT_TRUE(MessageHas(hosts.status(), {"2 devices but 1 hosts"})) << hosts.status().ToString();
  options.hosts = {};
  auto buckets = ops::Replicate(model.root.graph(), options);
  EXPECT_TRUE(MessageHas(buckets.status(), {"bucket sizes must be positive"}))
      << buckets.status().ToString();
  options.bucket_bytes = 25 << 20;
  options.mode = ops::ReplicateOptions::Mode::kAsync;
  auto async = ops::Replicate(model.root.graph(), options);
  EXPECT_EQ(async.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(async.status(), {"need parameter servers"})) << async.status().ToString();
  options.parameter_servers = {"cpu:2"};
  options.mode = ops::ReplicateOptions::Mode::kBoundedStaleness;
  options.staleness = -1;
  auto negative = ops::Replicate(model.root.graph(), options);
  EXPECT_TRUE(MessageHas(negative.status(), {"staleness must be at least 0", "-1"}))
      << negative.status().ToString();
  options.mode = ops::ReplicateOptions::Mode::kSync;
  options.backup_workers = 2;
  auto backups = ops::Replicate(model.root.graph(), options);
  EXPECT_TRUE(MessageHas(backups.status(), {"2 backup workers", "fewer backups than the 2"}))
      << backups.status().ToString();
}

}  // namespace
}  // namespace dflow
