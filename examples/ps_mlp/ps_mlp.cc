// Parameter servers: the Fashion-MNIST MLP (784-512-512-10, Adam) as N data-parallel replicas
// whose variables, Adam state and updates live once on P parameter servers (ops::Replicate).
//   --mode sync       every step all replicas' mean gradient, applied once (as all-reduce does)
//   --mode async      each replica applies its own gradient as soon as it has it
//   --mode staleness  async, but a replica more than --staleness steps ahead of the slowest waits
//   --backup-workers B  (sync) each step's update takes the first N-B replicas' gradients
//   --replicas N --parameter-servers P   in-process devices cpu:0 .. cpu:N+P-1, servers last
//   --local-workers    N+P dflow-worker processes started here, servers the last P
//   --cluster FILE     the workers of a cluster spec (with --token-file), servers the last P
// In the asynchronous modes and with backup workers a replica's step is a batch of
// --batch-size of its own (the replicas take the epoch's batches as they come); otherwise a
// batch is split over the replicas. After
// every epoch the variables go through a checkpoint into the single-replica graph, which
// measures the test accuracy. --min-accuracy fails the program when no epoch reached it (the
// asynchronous modes' order of updates, and so their accuracy after a given epoch, varies from
// run to run by a few tenths of a percent).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "examples/common/cluster_flags.h"
#include "examples/common/example_util.h"
#include "rewrite/replicate.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "examples/common/local_cluster.h"
#endif

using namespace dflow;
using examples::Fail;

namespace {

// The single-replica training graph of fashion_mnist_mlp, with an "init" target.
struct Model {
  Scope root = Scope::NewRootScope();
  examples::Params params;
  std::string loss, logits, step;

  Model(double lr, uint64_t seed) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t s) {
      return examples::Dense(root.WithNameScope(name), params, in, nin, nout, s);
    };
    auto h1 = ops::Relu(root, dense("dense1", x, 784, 512, seed));
    auto h2 = ops::Relu(root, dense("dense2", h1, 512, 512, seed + 1));
    auto out = ops::Identity(root.WithOpName("logits"), dense("dense3", h2, 512, 10, seed + 2));
    auto mean = ops::ReduceMean(root.WithOpName("loss"),
                                ops::SparseSoftmaxCrossEntropyWithLogits(root, out, labels).loss);
    ops::Adam adam({.learning_rate = lr});
    step = adam.Minimize(root.WithOpName("train_step"), mean, params.variables()).name();
    std::vector<std::string> init = adam.init_targets();
    for (const auto& t : params.init_targets()) init.push_back(t);
    (void)examples::AddInitOp(root, init);
    loss = mean.name();
    logits = out.name();
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains the Fashion-MNIST MLP as replicas with parameter servers");
  tools::Configure(app, "ps_mlp");
  examples::TrainFlags flags(10);
  std::string mode = "async";
  int replicas = 2, servers = 1, staleness = 2, backup_workers = 0;
  examples::ClusterFlags cluster_flags;
  int& local_workers = cluster_flags.local_workers;
  flags.AddTo(app, {.devices = false});
  app.add_option("--mode", mode, "How updates reach the servers")
      ->check(CLI::IsMember({"sync", "async", "staleness"}));
  app.add_option("--staleness", staleness, "--mode staleness: steps a replica may lead by")
      ->check(tools::AtLeast(0));
  app.add_option("--backup-workers", backup_workers,
                 "--mode sync: updates take the first replicas - B gradients of a step")
      ->check(tools::AtLeast(0));
  app.add_option("--replicas", replicas, "Replicas (in process, or the first workers)")
      ->check(CLI::Range(1, 16));
  app.add_option("--parameter-servers", servers, "Parameter servers (the last devices)")
      ->check(CLI::Range(1, 8));
  auto* local = app.add_option("--local-workers", local_workers,
                               "Start N dflow-worker processes here: the first --replicas hold the "
                               "replicas, the rest the parameter servers (N = replicas + "
                               "parameter-servers; 0: none)")
                    ->check(CLI::Range(0, 24));
  cluster_flags.AddTo(app, "Replicas and servers on this cluster spec's workers");
  local->excludes("--cluster")->excludes("--rendezvous");
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;
  if (local_workers > 0 && local_workers != replicas + servers) {
    std::fprintf(stderr,
                 "error: InvalidArgument: --local-workers %d: --replicas %d and "
                 "--parameter-servers %d need %d workers\n",
                 local_workers, replicas, servers, replicas + servers);
    return tools::kUsageError;
  }

  std::vector<std::string> devices;
#ifdef DFLOW_WITH_DISTRIBUTED
  examples::LocalCluster cluster;
  if (cluster_flags.any()) {
    auto started = examples::StartCluster(argv[0], cluster_flags, "ps-mlp", {"--threads", "1"});
    if (!started.ok()) return Fail(started.status());
    cluster = std::move(started).value();
  }
  devices = cluster.CpuDevices();
#else
  if (cluster_flags.any()) {
    return Fail(Unimplemented("this build has no UCX, so no workers"));
  }
#endif
  const bool distributed = !devices.empty();
  if (!distributed) {
    for (int d = 0; d < replicas + servers; ++d) devices.push_back("cpu:" + std::to_string(d));
  }
  if (static_cast<int>(devices.size()) != replicas + servers) {
    return Fail(
        InvalidArgument("the cluster has {} tasks; --replicas {} and --parameter-servers "
                        "{} need {}",
                        devices.size(), replicas, servers, replicas + servers));
  }

  Model single(flags.lr, flags.seed), model(flags.lr, flags.seed);
  ops::ReplicateOptions options;
  options.devices.assign(devices.begin(), devices.begin() + replicas);
  options.parameter_servers.assign(devices.begin() + replicas, devices.end());
  options.averaged = {model.loss.substr(0, model.loss.find(':'))};
  options.mode = mode == "sync"    ? ops::ReplicateOptions::Mode::kSync
                 : mode == "async" ? ops::ReplicateOptions::Mode::kAsync
                                   : ops::ReplicateOptions::Mode::kBoundedStaleness;
  options.staleness = staleness;
  options.backup_workers = backup_workers;
  auto replicated = ops::Replicate(model.root.graph(), options);
  if (!replicated.ok()) return Fail(replicated.status());
  const bool own_batches = replicated->asynchronous || replicated->backup_workers > 0;
  if (!own_batches && flags.batch_size % replicas != 0) {
    return Fail(InvalidArgument("--batch-size {} does not divide into {} replicas",
                                flags.batch_size, replicas),
                tools::kUsageError);
  }
  if (!flags.save_graph.empty()) {
    if (Status s = serialization::SaveGraph(*replicated->graph, flags.save_graph); !s.ok()) {
      return Fail(s);
    }
    std::printf("saved the graph of %d replicas and %d servers (%d nodes) to %s\n", replicas,
                servers, replicated->graph->num_nodes(), flags.save_graph.c_str());
    return 0;
  }

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, flags.data_dir);
  if (!test.ok()) return Fail(test.status());
  SessionOptions session_options;
  session_options.threads.num_threads = flags.threads;
  std::unique_ptr<Session> session;
#ifdef DFLOW_WITH_DISTRIBUTED
  if (distributed) {
    auto d = distributed::DistributedSession::Create(*replicated->graph, session_options,
                                                     cluster.options);
    if (!d.ok()) return Fail(d.status());
    session = std::move(d).value();
  }
#endif
  if (!distributed) {
    session_options.devices = devices;
    auto l = Session::Create(*replicated->graph, session_options);
    if (!l.ok()) return Fail(l.status());
    session = std::move(l).value();
  }
  if (Status s = session->Run({}, {}, {"init"}).status(); !s.ok()) return Fail(s);
  if (!replicated->init_target.empty()) {
    if (Status s = session->Run({}, {}, {replicated->init_target}).status(); !s.ok()) {
      return Fail(s);
    }
  }
  // The single-replica graph on this process's CPU measures the accuracy.
  SessionOptions eval_options;
  eval_options.threads.num_threads = flags.threads;
  auto eval = Session::Create(single.root, eval_options);
  if (!eval.ok()) return Fail(eval.status());
  std::printf("%d replicas, %d parameter servers, %s%s; placement:\n%s\n", replicas, servers,
              mode.c_str(), mode == "staleness" ? (" " + std::to_string(staleness)).c_str() : "",
              session->placement().Summary(session->device_set()).c_str());

  TrainLoopOptions loop{.epochs = flags.epochs, .max_steps_per_epoch = flags.steps_per_epoch};
  if (own_batches) {
    for (int r = 0; r < replicas; ++r) {
      loop.replicas.push_back({.images_feed = ops::ReplicaName("x", r),
                               .labels_feed = ops::ReplicaName("labels", r),
                               .loss = ops::ReplicaName(model.loss, r),
                               .train_target = replicated->backup_workers > 0
                                                   ? replicated->replica_targets[r]
                                                   : ops::ReplicaName(model.step, r)});
    }
    loop.max_staleness = replicated->max_staleness;
    loop.backup_workers = replicated->backup_workers;
    loop.apply_target = replicated->apply_target;
    loop.weights_feed = replicated->weights_feed;
  } else {
    loop.loss = model.loss;
    loop.train_target = model.step;
  }
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / fmt::format("ps_mlp_{}.dfckpt", getpid())).string();
  double accuracy = 0, best = 0;
  int best_epoch = 0;
  Batcher batches(*train, flags.batch_size, flags.seed);
  Status trained = TrainLoop(*session, batches, loop, [&](const EpochStats& e) -> Status {
    RETURN_IF_ERROR(session->SaveCheckpoint(ckpt));
    Status restored = (*eval)->RestoreCheckpoint(ckpt);
    std::filesystem::remove(ckpt);
    RETURN_IF_ERROR(restored);
    ASSIGN_OR_RETURN(accuracy, Accuracy(**eval, *test, "x", single.logits, 1000));
    if (accuracy > best) {
      best = accuracy;
      best_epoch = e.epoch;
    }
    std::printf("epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, %.0f examples/s", e.epoch,
                e.mean_loss, 100 * accuracy, e.seconds, e.examples_per_second);
    if (replicated->asynchronous) {
      std::printf(", staleness mean %.2f most %lld, held %lld times", e.mean_staleness,
                  static_cast<long long>(e.most_staleness), static_cast<long long>(e.held));
    }
    if (replicated->backup_workers > 0) {
      std::printf(", %lld late gradients dropped", static_cast<long long>(e.dropped));
    }
    std::printf("\n");
    std::fflush(stdout);
    return Status::OK();
  });
  if (!trained.ok()) return Fail(trained);
  std::printf("best test accuracy %.2f%% (epoch %d), final %.2f%%\n", 100 * best, best_epoch,
              100 * accuracy);
  if (best < flags.min_accuracy) {
    std::fprintf(stderr,
                 "error: no epoch reached the required test accuracy %.2f%% (best %.2f%%)\n",
                 100 * flags.min_accuracy, 100 * best);
    return 1;
  }
  return 0;
}
