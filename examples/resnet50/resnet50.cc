// Trains ResNet-50 (CIFAR-10 shapes: 32x32 RGB images, 10 classes) on one synthetic batch with
// SGD and momentum, the batch norms' running statistics updated with every step, and prints
// the loss and time of each step and the median step time and images per second. The seeded
// batch stays the same from step to step (as in the usual synthetic-data benchmarks), so the loss
// must fall: --check-learns fails the program when the last step's loss is not below the first's.
//
//   resnet50 --devices gpu:0             # batch 128 on the GPU
//   resnet50 --batch-size 8 --steps 3   # a short run on the CPU
//   resnet50 --devices gpu:0 --profile 3 # then 3 profiled steps: time per op, by the device's
//                                        # clock (a GPU's kernels, not their queueing)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "examples/resnet50/resnet.h"
#include "tools/cli.h"
#include "tools/device_list.h"

using namespace dflow;
using examples::Fail;

namespace {

// Images N(0, 1) and uniform labels in [0, classes), from `seed`.
void SyntheticBatch(int64_t n, int64_t classes, uint64_t seed, Tensor* images, Tensor* labels) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes) - 1);
  *images = Tensor(DType::kF32, Shape{n, 3, 32, 32});
  float* p = images->data<float>();
  for (int64_t i = 0; i < images->num_elements(); ++i) p[i] = pixel(rng);
  *labels = Tensor(DType::kI32, Shape{n});
  for (int64_t i = 0; i < n; ++i) labels->data<int32_t>()[i] = label(rng);
}

// The profile of `session`'s profiled steps: milliseconds per step by op and the nodes that
// took longest. Nodes the compiler made (fused, or split across devices) that the user's graph
// lacks are counted under their name's op "(compiled)".
void PrintProfile(const Session& session, const Graph& graph, int top_nodes) {
  MeasuredCosts costs = session.MeasuredNodeCosts();
  for (const auto& [device_type, nodes] : costs.seconds) {
    std::map<std::string, std::pair<double, int>> by_op;
    std::vector<std::pair<double, std::string>> by_node;
    double total = 0;
    for (const auto& [name, seconds] : nodes) {
      if (seconds <= 0) continue;  // in the plan's graph, not run by the profiled steps
      auto id = graph.FindNode(name);
      auto& [sum, count] = by_op[id ? graph.node(*id).op() : "(compiled)"];
      sum += seconds;
      ++count;
      total += seconds;
      by_node.emplace_back(seconds, name);
    }
    std::vector<std::pair<double, std::string>> ops;
    for (const auto& [op, entry] : by_op) {
      ops.emplace_back(entry.first, fmt::format("{} ({} nodes)", op, entry.second));
    }
    std::sort(ops.rbegin(), ops.rend());
    std::sort(by_node.rbegin(), by_node.rend());
    std::printf("profile on %s: %.2f ms of nodes per step\n", device_type.c_str(), total * 1e3);
    for (const auto& [seconds, what] : ops) {
      std::printf("  op %8.3f ms %5.1f%%  %s\n", seconds * 1e3, 100 * seconds / total,
                  what.c_str());
    }
    for (size_t i = 0; i < by_node.size() && static_cast<int>(i) < top_nodes; ++i) {
      std::printf("  node %8.3f ms  %s\n", by_node[i].first * 1e3, by_node[i].second.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains ResNet-50 on a synthetic CIFAR-10-shaped batch and reports its speed");
  tools::Configure(app, "resnet50");
  examples::ResNetConfig config;
  int64_t batch = 128;
  int steps = 10, warmup = 1, threads = 0, profile = 0;
  double lr = 0.002, momentum = 0.9;
  bool check_learns = false;
  std::string devices = "cpu:0", save;
  app.add_option("--depth", config.depth, "50, 101 or 152")->check(CLI::IsMember({50, 101, 152}));
  app.add_option("--width", config.width, "Channels of the first stage (64: ResNet-50 itself)")
      ->check(tools::AtLeast(1));
  app.add_option("--batch-size", batch, "Images per step")->check(tools::AtLeast(1));
  app.add_option("--steps", steps, "Timed training steps")->check(tools::AtLeast(1));
  app.add_option("--warmup", warmup, "Untimed steps first (kernels chosen, memory planned)")
      ->check(tools::AtLeast(0));
  app.add_option("--lr", lr, "SGD learning rate")->check(tools::Positive());
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", config.seed, "Seed for the weights and the batch");
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(tools::AtLeast(0));
  app.add_option("--devices", devices,
                 "The device every node runs on, as dflow-run takes it: cpu:0, gpu:0, ...");
  app.add_option("--profile", profile,
                 "After the timed steps, N more with every node timed; prints time per op and "
                 "the slowest nodes")
      ->check(tools::AtLeast(0));
  app.add_flag("--check-learns", check_learns,
               "Exit with status 1 unless the last step's loss is below the first's");
  app.add_option("--save", save,
                 "Write the training graph to FILE.dfg (or .json) for dflow-run and dflow-dot, "
                 "then exit without training");
  if (auto code = tools::Parse(app, argc, argv)) return *code;
  auto device_list = tools::ParseDeviceList(devices);
  if (device_list.ok() && device_list->size() != 1) {
    device_list = InvalidArgument("--devices '{}': this example runs on one device", devices);
  }
  if (!device_list.ok()) {
    std::fprintf(stderr, "error: %s\n", device_list.status().ToString().c_str());
    return tools::kUsageError;
  }
  const std::string device = device_list->front();

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3, 32, 32});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  examples::ResNetModel model = examples::BuildResNet(root, x, config);
  if (!root.status().ok()) return Fail(root.status());
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, model.logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Momentum sgd({.learning_rate = lr, .momentum = momentum});
  auto update = sgd.Minimize(root, loss, model.params.variables());
  std::vector<Output> step_deps = model.stat_updates;
  step_deps.push_back(update.node);
  ops::NoOp(root.WithOpName("train").WithControlDependencies(step_deps));
  std::vector<std::string> init = sgd.init_targets();
  for (const auto& t : model.params.init_targets()) init.push_back(t);
  for (const auto& t : model.running_stats.init_targets()) init.push_back(t);
  if (Status s = examples::AddInitOp(root, init); !s.ok()) return Fail(s);
  const int64_t num_params = [&] {
    int64_t n = 0;
    for (const auto& v : model.params.vars) {
      n += v.var.shape().num_elements();
    }
    return n;
  }();
  if (!save.empty()) {
    auto nodes = examples::SaveScopeGraph(root, save);
    if (!nodes.ok()) return Fail(nodes.status());
    std::printf(
        "saved the training graph (%d nodes; targets 'init' and 'train', loss '%s') to %s\n",
        *nodes, loss.name().c_str(), save.c_str());
    return 0;
  }

  SessionOptions options;
  options.device = device;
  options.threads.num_threads = threads;
  auto session = Session::Create(root, options);
  if (!session.ok()) return Fail(session.status());
  if (auto r = (*session)->Run({}, {}, {"init"}); !r.ok()) return Fail(r.status());
  Tensor images, label_values;
  SyntheticBatch(batch, config.classes, config.seed, &images, &label_values);
  std::printf("ResNet-%d (width %lld, %.1fM parameters) on %s: batch %lld of 3x32x32, %d steps\n",
              config.depth, static_cast<long long>(config.width), num_params / 1e6, device.c_str(),
              static_cast<long long>(batch), steps);
  std::fflush(stdout);

  Session::Feeds feeds{{"x", images}, {"labels", label_values}};
  std::vector<double> step_ms;
  double first_loss = NAN, last_loss = NAN;
  for (int i = 0; i < warmup + steps; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto out = (*session)->Run(feeds, {loss.name()}, {"train"});
    if (!out.ok()) return Fail(out.status());
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double value = (*out)[0].data<float>()[0];
    if (i == 0) first_loss = value;
    last_loss = value;
    const bool timed = i >= warmup;
    if (timed) step_ms.push_back(ms);
    std::printf("step %d%s: loss %.4f, %.1f ms\n", i + 1, timed ? "" : " (warm-up)", value, ms);
    std::fflush(stdout);
    if (!std::isfinite(value)) {
      std::fprintf(stderr, "error: the loss of step %d is %f\n", i + 1, value);
      return 1;
    }
  }
  std::sort(step_ms.begin(), step_ms.end());
  const double median = step_ms[step_ms.size() / 2];
  std::printf("median step %.1f ms, %.1f images/s\n", median, batch * 1000.0 / median);
  if (profile > 0) {
    for (int i = 0; i < profile; ++i) {
      auto out = (*session)->Run(feeds, {loss.name()}, {"train"}, {.profile = true});
      if (!out.ok()) return Fail(out.status());
    }
    PrintProfile(**session, root.graph(), 25);
  }
  if (check_learns && !(last_loss < first_loss)) {
    std::fprintf(stderr, "error: the loss did not fall: %.4f at the first step, %.4f at the last\n",
                 first_loss, last_loss);
    return 1;
  }
  return 0;
}
