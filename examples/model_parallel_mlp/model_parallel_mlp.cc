// Model parallelism: a wide MLP (784-2048-2048-10 with Adam) on two CPU devices that offer
// 72 MiB each. Training it needs about 88 MB: 70 MB of weights and optimizer state, plus each
// weight's gradient (17 MB for the middle layer) while its update runs. No single device can
// hold that, so the placer, which counts variables and peak activations against each device,
// must split it.
// The placer splits the layers between cpu:0 and cpu:1; the session partitions the graph and
// joins the halves with Send/Recv. Prints the placement summary, then trains on Fashion-MNIST.
// --check-split (its ctest passes it) exits with status 1 unless every device holds nodes.
//
// Across processes (built with UCX): --local-workers N starts N dflow-worker processes on this
// host (one core each) and trains across them; --cluster FILE with --token-file FILE uses
// workers already running (README, "Across processes and hosts"). The placer still plans with
// --device-memory-mib per device, but the workers get twice that: a tensor received from
// another process takes memory of the receiving device as well, which the placer does not
// count yet.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "tools/device_list.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "examples/common/local_cluster.h"
#endif

using namespace dflow;
using examples::Fail;

namespace {

// --devices: a count N (cpu:0 .. cpu:N-1, N at most 16) or a list as dflow-run takes it.
Result<std::vector<std::string>> DeviceListFlag(const std::string& text) {
  if (!text.empty() && text.size() <= 2 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int n = std::stoi(text);
    if (n < 1 || n > 16) return InvalidArgument("--devices {}: give 1 to 16 devices", n);
    std::vector<std::string> devices;
    for (int i = 0; i < n; ++i) devices.push_back("cpu:" + std::to_string(i));
    return devices;
  }
  return tools::ParseDeviceList(text);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains a wide MLP split by the placer across two CPU devices");
  examples::TrainFlags flags(1);
  int64_t width = 2048;
  double memory_mib = 72;
  std::string devices = "2";
  bool log_placement = false, check_split = false, fixed_costs = false;
  std::string placer = "cost";
  flags.AddTo(app);
  app.add_option("--width", width, "Units in each hidden layer")->check(CLI::PositiveNumber);
  app.add_option("--device-memory-mib", memory_mib, "Memory each device offers the placer")
      ->check(CLI::PositiveNumber);
  app.add_option("--devices", devices,
                 "N (cpu:0 .. cpu:N-1), or the list cpu:0,cpu:1,... as dflow-run takes it");
  app.add_flag("--log-placement", log_placement, "Print the device of every node");
  app.add_option("--placer", placer, "cost (the cost model) or simple (one device, as TensorFlow)")
      ->check(CLI::IsMember({"cost", "simple"}));
  app.add_flag("--fixed-costs", fixed_costs,
               "Give the placer fixed device figures instead of measuring this machine, as "
               "dflow-run --fixed-costs does: the same placement on every run");
  app.add_flag("--check-split", check_split,
               "Exit with status 1 unless every device holds nodes (the model was split)");
  int local_workers = 0;
  std::string cluster_file, token_file;
  app.add_option("--local-workers", local_workers,
                 "Start N dflow-worker processes here and train across them")
      ->check(CLI::Range(1, 8));
  app.add_option("--cluster", cluster_file, "Train across the workers of this cluster spec");
  app.add_option("--token-file", token_file, "The cluster token (with --cluster)");
  CLI11_PARSE(app, argc, argv);
  auto device_list = DeviceListFlag(devices);
  if (!device_list.ok()) return Fail(device_list.status());

  Scope root = Scope::NewRootScope();
  examples::Params p;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t seed) {
    return examples::Dense(root.WithNameScope(name), p, in, nin, nout, seed);
  };
  auto h1 = ops::Relu(root, dense("dense1", x, 784, width, flags.seed));
  auto h2 = ops::Relu(root, dense("dense2", h1, width, width, flags.seed + 1));
  auto logits =
      ops::Identity(root.WithOpName("logits"), dense("dense3", h2, width, 10, flags.seed + 2));
  SessionOptions options;
  options.devices = *device_list;
  options.device_memory_bytes = memory_mib * (1 << 20);
  options.placer.log_placement = log_placement;
  options.calibrate_devices = !fixed_costs;
  options.placer.kind =
      placer == "simple" ? PlacerOptions::Kind::kSimple : PlacerOptions::Kind::kCost;
  options.placer.costs.unknown_dim = flags.batch_size;  // the placer's estimates use the batch
  auto summary = [&](Session& session) -> Status {
    std::printf("placement on %zu devices of %.0f MiB each:\n%s\n", options.devices.size(),
                memory_mib, session.placement().Summary(session.device_set()).c_str());
    for (const auto& line : session.placement().log) std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
    if (check_split) return examples::CheckEveryDeviceHoldsNodes(session);
    return Status::OK();
  };
  examples::SessionMaker make;
#ifdef DFLOW_WITH_DISTRIBUTED
  examples::LocalCluster cluster;
  if (local_workers > 0 || !cluster_file.empty()) {
    std::vector<std::string> flags = {"--threads", "1", "--memory-limit",
                                      std::to_string(static_cast<int64_t>(2 * memory_mib)) + "MiB"};
    if (fixed_costs) flags.push_back("--fixed-costs");  // they register the defaults
    auto started = examples::StartCluster(argv[0], local_workers, cluster_file, token_file,
                                          "model-parallel-mlp", flags);
    if (!started.ok()) return Fail(started.status());
    cluster = std::move(started).value();
    make = [&](const Scope& scope, const SessionOptions& o) -> Result<std::unique_ptr<Session>> {
      ASSIGN_OR_RETURN(auto s,
                       distributed::DistributedSession::Create(scope.graph(), o, cluster.options));
      return std::unique_ptr<Session>(std::move(s));
    };
  }
#else
  if (local_workers > 0 || !cluster_file.empty()) {
    return Fail(Unimplemented("this build has no UCX, so no workers"));
  }
#endif
  std::string title =
      "Fashion-MNIST, wide MLP 784-" + std::to_string(width) + "-" + std::to_string(width) + "-10";
  return examples::TrainClassifier(root, p, logits, labels, flags, title, options, summary, make);
}
