// Data parallelism by graph rewrite: the single-replica training graph of an MLP (784-256-10,
// SGD) is replicated by ops::Replicate, one replica per device, each computing the loss and the
// gradients of its share of every batch; ring all-reduces (Send/Recv underneath) average the
// gradients, and every replica applies the same update to its own copy of the variables.
//   --replicas N          N in-process devices cpu:0 .. cpu:N-1 (default 2)
//   --local-workers N     N dflow-worker processes started here, a replica on each
//   --cluster FILE        the workers of a cluster spec (with --token-file), a replica on each
// The program trains the single replica on one device beside it, on the same batches, and fails
// if the replicated loss drifts from it by more than --tolerance (relative). The two sum the same
// gradients in a different order, so rounding differences grow slowly: about 1e-7 in the first
// steps, a few 1e-3 after 200.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "examples/common/cluster_flags.h"
#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "rewrite/replicate.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "examples/common/local_cluster.h"
#endif

using namespace dflow;
using examples::Fail;

namespace {

// The single-replica training graph, with an "init" target over every initialiser.
struct Model {
  Scope root = Scope::NewRootScope();
  examples::Params params;
  std::string loss, step;

  Model(double lr, uint64_t seed) {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
    auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    Output w1 =
        params.Add(root.WithOpName("w1"), Shape{784, 256}, ops::Initializer::GlorotUniform(seed));
    Output b1 = params.Add(root.WithOpName("b1"), Shape{256}, ops::Initializer::Zeros());
    Output w2 = params.Add(root.WithOpName("w2"), Shape{256, 10},
                           ops::Initializer::GlorotUniform(seed + 1));
    Output b2 = params.Add(root.WithOpName("b2"), Shape{10}, ops::Initializer::Zeros());
    auto h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w1), b1));
    auto logits = ops::BiasAdd(root, ops::MatMul(root, h, w2), b2);
    auto mean = ops::ReduceMean(root.WithOpName("loss"),
                                ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
    loss = mean.name();
    ops::SGD sgd({.learning_rate = lr});
    step = sgd.Minimize(root.WithOpName("train_step"), mean, params.variables()).name();
    (void)examples::AddInitOp(root, params.init_targets());
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains an MLP as N data-parallel replicas against the single replica");
  tools::Configure(app, "data_parallel_mlp");
  examples::TrainFlags flags(1);
  flags.lr = 0.1;
  int64_t steps = 200;
  double tolerance = 1e-2;
  int replicas = 2;
  examples::ClusterFlags cluster_flags;
  flags.AddTo(app, {.epochs = false, .devices = false, .accuracy = false});
  app.add_option("--steps", steps, "Training steps")->check(tools::AtLeast(1));
  app.add_option("--tolerance", tolerance, "Largest relative loss difference allowed");
  app.add_option("--replicas", replicas, "Replicas on in-process devices cpu:0 .. cpu:N-1")
      ->check(CLI::Range(1, 16));
  app.add_option("--local-workers", cluster_flags.local_workers,
                 "Start N dflow-worker processes here, a replica on each (0: none)")
      ->check(CLI::Range(0, 8));
  cluster_flags.AddTo(app, "A replica on each worker of this cluster spec");
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;

  // The replicas' devices.
  std::vector<std::string> devices;
#ifdef DFLOW_WITH_DISTRIBUTED
  examples::LocalCluster cluster;
  if (cluster_flags.any()) {
    auto started =
        examples::StartCluster(argv[0], cluster_flags, "data-parallel-mlp", {"--threads", "1"});
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
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
  }
  const auto n = static_cast<int64_t>(devices.size());
  if (flags.batch_size % n != 0) {
    return Fail(
        InvalidArgument("--batch-size {} does not divide into {} replicas", flags.batch_size, n),
        tools::kUsageError);
  }

  Model single(flags.lr, flags.seed), model(flags.lr, flags.seed);
  ops::ReplicateOptions options;
  options.devices = devices;
  options.averaged = {model.loss.substr(0, model.loss.find(':'))};
#ifdef DFLOW_WITH_DISTRIBUTED
  if (distributed) {
    // Workers on several hosts: the all-reduces sum inside each host first.
    auto hosts = distributed::ReplicaHosts(cluster.options.cluster, devices);
    if (!hosts.ok()) return Fail(hosts.status());
    options.hosts = *hosts;
  }
#endif
  auto replicated = ops::Replicate(model.root.graph(), options);
  if (!replicated.ok()) return Fail(replicated.status());

  if (!flags.save_batch.empty()) {
    // The replicated graph takes the whole batch under the single replica's feed names.
    Status s = examples::SaveSampleBatch(flags, [&](const Tensor& images, const Tensor& labels) {
      return Session::Feeds{{"x", images}, {"labels", labels}};
    });
    if (!s.ok()) return Fail(s);
    if (flags.save_graph.empty()) return 0;
  }
  if (!flags.save_graph.empty()) {
    Status s = serialization::SaveGraph(*replicated->graph, flags.save_graph);
    if (!s.ok()) return Fail(s);
    std::printf(
        "saved the graph of %lld replicas (%d nodes; feeds x and labels, the whole batch; "
        "targets 'init' and '%s', loss '%s') to %s\n",
        static_cast<long long>(n), replicated->graph->num_nodes(), model.step.c_str(),
        model.loss.c_str(), flags.save_graph.c_str());
    return 0;
  }

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());
  SessionOptions one_device, many;
  one_device.threads.num_threads = many.threads.num_threads = flags.threads;
  auto s1 = Session::Create(single.root, one_device);
  if (!s1.ok()) return Fail(s1.status());
  std::unique_ptr<Session> s2;
#ifdef DFLOW_WITH_DISTRIBUTED
  if (distributed) {
    auto d = distributed::DistributedSession::Create(*replicated->graph, many, cluster.options);
    if (!d.ok()) return Fail(d.status());
    s2 = std::move(d).value();
  }
#endif
  if (!distributed) {
    many.devices = devices;
    auto l = Session::Create(*replicated->graph, many);
    if (!l.ok()) return Fail(l.status());
    s2 = std::move(l).value();
  }
  for (Session* s : {s1->get(), s2.get()}) {
    if (Status st = s->Run({}, {}, {"init"}).status(); !st.ok()) return Fail(st);
  }
  std::printf("%lld replicas, gradients in %d all-reduce buckets; placement:\n%s\n",
              static_cast<long long>(n), replicated->buckets,
              s2->placement().Summary(s2->device_set()).c_str());

  Batcher batches(*train, flags.batch_size, flags.seed);
  batches.StartEpoch(0);
  Tensor images, labels;
  double worst = 0, seconds_one = 0, seconds_many = 0;
  for (int64_t i = 0; i < steps; ++i) {
    if (!batches.Next(&images, &labels)) {
      batches.StartEpoch(static_cast<int>(i));
      batches.Next(&images, &labels);
    }
    const Session::Feeds feeds = {{"x", images}, {"labels", labels}};
    auto t0 = std::chrono::steady_clock::now();
    auto a = (*s1)->Run(feeds, {single.loss}, {single.step});
    if (!a.ok()) return Fail(a.status());
    auto t1 = std::chrono::steady_clock::now();
    auto b = s2->Run(feeds, {model.loss}, {model.step});
    if (!b.ok()) return Fail(b.status());
    auto t2 = std::chrono::steady_clock::now();
    seconds_one += std::chrono::duration<double>(t1 - t0).count();
    seconds_many += std::chrono::duration<double>(t2 - t1).count();
    double la = a->at(0).data<float>()[0], lb = b->at(0).data<float>()[0];
    worst = std::max(worst, std::abs(la - lb) / std::max(std::abs(la), 1e-12));
    if (i % 25 == 0 || i == steps - 1) {
      std::printf("step %4lld: loss one replica %.6f, %lld replicas %.6f\n",
                  static_cast<long long>(i), la, static_cast<long long>(n), lb);
    }
  }
  std::printf(
      "largest relative loss difference over %lld steps: %.2e; mean step %.2f ms on one device, "
      "%.2f ms as %lld replicas\n",
      static_cast<long long>(steps), worst, seconds_one / steps * 1e3, seconds_many / steps * 1e3,
      static_cast<long long>(n));
  if (!(worst <= tolerance)) {
    std::fprintf(stderr, "error: the replicated loss drifted %.2e from the single replica's\n",
                 worst);
    return 1;
  }
  return 0;
}
