// Model parallelism: a wide MLP (784-2048-2048-10 with Adam) on two CPU devices that offer
// 72 MiB each. Training it needs about 88 MB: 70 MB of weights and optimizer state, plus each
// weight's gradient (17 MB for the middle layer) while its update runs. No single device can
// hold that, so the placer, which counts variables and peak activations against each device,
// must split it.
// The placer splits the layers between cpu:0 and cpu:1; the session partitions the graph and
// joins the halves with Send/Recv. Prints the placement summary, then trains on Fashion-MNIST.
// --check-split (its ctest passes it) exits with status 1 unless every device holds nodes.
//
// Pipelined (--micro-batches M): instead of the placer's split, the model is cut into stages,
// one per device (placer/pipeline.h: the cut the cost model finds fastest among those that fit
// each device's --memory-limit), and every batch flows through them as M micro-batches, 1F1B
// or GPipe (--schedule), so the devices work at once. Prints the stages and the predicted step.
// --stages K takes the devices cpu:0 to cpu:K-1 (or, with workers, the first K workers).
// The test accuracy comes from the pipelined graph's forward-only copy of the logits.
//
// Across processes (built with UCX): --local-workers N starts N dflow-worker processes on this
// host (one core each) and trains across them; --cluster FILE with --token-file FILE uses
// workers already running (README, "Across processes and hosts"). The placer still plans with
// --memory-limit per device, but the workers get twice that: a tensor received from
// another process takes memory of the receiving device as well, which the placer does not
// count yet.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "examples/common/cluster_flags.h"
#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/session_devices.h"
#include "tools/pipeline_flags.h"
#include "tools/placement_flags.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "examples/common/local_cluster.h"
#endif

using namespace dflow;
using examples::Fail;

int main(int argc, char** argv) {
  CLI::App app("Trains a wide MLP split by the placer across two CPU devices");
  tools::Configure(app, "model_parallel_mlp");
  examples::TrainFlags flags(1);
  int64_t width = 2048;
  int layers = 2;
  tools::PipelineFlags pipeline;  // --micro-batches, --stages, --schedule
  bool check_split = false, log_placement = false;
  // The placer's flags as dflow-run takes them, with this example's defaults.
  tools::PlacementFlags placement;
  placement.devices = "cpu:0,cpu:1";
  placement.memory_limit = "72MiB";
  flags.AddTo(app, {.devices = false});
  app.add_option("--width", width, "Units in each hidden layer")->check(tools::AtLeast(1));
  app.add_option("--layers", layers, "Hidden layers")->check(CLI::Range(1, 64));
  placement.AddTo(app,
                  "The devices the placer splits the model across: cpu:0,cpu:1,... as "
                  "dflow-run takes them");
  pipeline.AddTo(app, /*graph_names=*/false, "--devices");
  pipeline.gathered = {"logits"};
  app.add_flag("--log-placement", log_placement, "Print the device of every node");
  app.add_flag("--check-split", check_split,
               "Exit with status 1 unless every device holds nodes (the model was split)");
  examples::ClusterFlags cluster_flags;
  app.add_option("--local-workers", cluster_flags.local_workers,
                 "Start N dflow-worker processes here and train across them (0: none)")
      ->check(CLI::Range(0, 8));
  cluster_flags.AddTo(app, "Train across the workers of this cluster spec");
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;
  if (Status s = placement.Check(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return tools::kUsageError;
  }
  if (Status s = pipeline.Check(app); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return tools::kUsageError;
  }
  placement.device_list = pipeline.LocalDevices(placement.device_list);
  if (pipeline.on() && flags.batch_size % pipeline.micro_batches != 0) {
    std::fprintf(stderr, "error: --batch-size %lld does not divide into %d micro-batches\n",
                 static_cast<long long>(flags.batch_size), pipeline.micro_batches);
    return tools::kUsageError;
  }
  const double memory_mib = static_cast<double>(placement.memory_bytes) / (1 << 20);

  Scope root = Scope::NewRootScope();
  examples::Params p;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t seed) {
    return examples::Dense(root.WithNameScope(name), p, in, nin, nout, seed);
  };
  Output h = ops::Relu(root, dense("dense1", x, 784, width, flags.seed));
  for (int l = 1; l < layers; ++l) {
    h = ops::Relu(root,
                  dense(fmt::format("dense{}", l + 1).c_str(), h, width, width, flags.seed + l));
  }
  auto logits = ops::Identity(
      root.WithOpName("logits"),
      dense(fmt::format("dense{}", layers + 1).c_str(), h, width, 10, flags.seed + layers));
  SessionOptions options;
  // The placer's estimates use the batch unless --assume-batch says otherwise.
  options.placer.costs.unknown_dim = flags.batch_size;
  placement.ApplyTo(options);
  options.placer.log_placement = log_placement;
  auto summary = [&](Session& session) -> Status {
    std::printf("placement on %zu devices of %.0f MiB each:\n%s\n", options.devices.size(),
                memory_mib, session.placement().Summary(session.device_set()).c_str());
    for (const auto& line : session.placement().log) std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
    if (check_split) return examples::CheckEveryDeviceHoldsNodes(session);
    return Status::OK();
  };
  // --micro-batches: the graph pipelined over `devices` (their figures and limits in `set`),
  // its stages printed; the session's placer then sees micro-batches.
  auto pipelined = [&](const Scope& scope, SessionOptions& o,
                       const std::vector<std::string>& devices,
                       const DeviceSet& set) -> Result<std::shared_ptr<Graph>> {
    ASSIGN_OR_RETURN(PipelinedGraph piped,
                     pipeline.Apply(scope.graph(), devices, set, flags.batch_size,
                                    static_cast<double>(placement.memory_bytes), stdout,
                                    &o.placer.costs.unknown_dim));
    return piped.graph;
  };
  examples::SessionMaker make;
  if (pipeline.on()) {
    make = [&](const Scope& scope, const SessionOptions& o) -> Result<std::unique_ptr<Session>> {
      SessionOptions mine = o;
      ASSIGN_OR_RETURN(SessionDevices devices, CreateSessionDevices(mine));
      ASSIGN_OR_RETURN(auto graph, pipelined(scope, mine, o.devices, devices.set));
      return Session::Create(*graph, mine);
    };
  }
#ifdef DFLOW_WITH_DISTRIBUTED
  examples::LocalCluster cluster;
  if (cluster_flags.any()) {
    std::vector<std::string> flags = {"--threads", "1", "--memory-limit",
                                      std::to_string(static_cast<int64_t>(2 * memory_mib)) + "MiB"};
    if (placement.fixed_costs) flags.push_back("--fixed-costs");  // they register the defaults
    auto started = examples::StartCluster(argv[0], cluster_flags, "model-parallel-mlp", flags);
    if (!started.ok()) return Fail(started.status());
    cluster = std::move(started).value();
    make = [&](const Scope& scope, const SessionOptions& o) -> Result<std::unique_ptr<Session>> {
      if (!pipeline.on()) {
        ASSIGN_OR_RETURN(
            auto s, distributed::DistributedSession::Create(scope.graph(), o, cluster.options));
        return std::unique_ptr<Session>(std::move(s));
      }
      // A stage on each worker's cpu:0 (the first --stages workers), planned with
      // --memory-limit per device and this host's CPU as the workers run it (one thread).
      DeviceSet set;
      ASSIGN_OR_RETURN(
          std::vector<std::string> devices,
          pipeline.WorkerDevices(static_cast<int>(cluster.options.cluster.jobs.at("worker").size()),
                                 1, placement.fixed_costs,
                                 static_cast<double>(placement.memory_bytes), &set));
      SessionOptions mine = o;
      ASSIGN_OR_RETURN(auto graph, pipelined(scope, mine, devices, set));
      ASSIGN_OR_RETURN(auto s,
                       distributed::DistributedSession::Create(*graph, mine, cluster.options));
      return std::unique_ptr<Session>(std::move(s));
    };
  }
#else
  if (cluster_flags.any()) {
    return Fail(Unimplemented("this build has no UCX, so no workers"));
  }
#endif
  std::string title = "Fashion-MNIST, wide MLP 784";
  for (int l = 0; l < layers; ++l) title += "-" + std::to_string(width);
  title += "-10";
  if (pipeline.on()) {
    title += fmt::format(", pipelined in {} micro-batches", pipeline.micro_batches);
  }
  return examples::TrainClassifier(root, p, logits, labels, flags, title, options, summary, make,
                                   pipeline.on() ? EvaluationName("logits") : "");
}
