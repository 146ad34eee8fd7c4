// Data parallelism through the same partitioning: two replicas of an MLP, one on cpu:0 and one
// on cpu:1, each computing the loss of half of every batch. Gradients are summed across the
// devices (Send/Recv carry them) into one set of variables on cpu:0, updated by SGD. The loss
// must follow the single-device run on the full batch step by step: the program trains both and
// fails if they drift apart by more than --tolerance (relative). The two sum the same gradients
// in a different order, so rounding differences grow slowly over many steps: about 1e-7 in the
// first steps, a few 1e-3 relative after 200.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "examples/common/example_util.h"
#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"

using namespace dflow;
using examples::Fail;

namespace {

// Rows [begin, begin + count) of a [N, ...] tensor, copied.
Tensor Rows(const Tensor& t, int64_t begin, int64_t count) {
  std::vector<int64_t> dims = t.shape().dim_vector();
  int64_t row_bytes = t.num_bytes() / dims[0];
  dims[0] = count;
  Tensor out(t.dtype(), Shape(dims));
  std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + begin * row_bytes,
              count * row_bytes);
  return out;
}

struct Model {
  Scope root = Scope::NewRootScope();
  examples::Params params;
  std::string loss, step;

  // replicas == 1: one model on the full batch (feeds x0, labels0); 2: one replica per device.
  Model(int replicas, double lr, uint64_t seed) {
    Scope vars = replicas > 1 ? root.WithDevice("cpu:0") : root;
    Output w1 =
        params.Add(vars.WithOpName("w1"), Shape{784, 256}, ops::Initializer::GlorotUniform(seed));
    Output b1 = params.Add(vars.WithOpName("b1"), Shape{256}, ops::Initializer::Zeros());
    Output w2 = params.Add(vars.WithOpName("w2"), Shape{256, 10},
                           ops::Initializer::GlorotUniform(seed + 1));
    Output b2 = params.Add(vars.WithOpName("b2"), Shape{10}, ops::Initializer::Zeros());
    std::vector<Output> losses;
    for (int r = 0; r < replicas; ++r) {
      Scope s = replicas > 1 ? root.WithDevice("cpu:" + std::to_string(r)) : root;
      s = s.WithNameScope("replica" + std::to_string(r));
      auto x =
          ops::Placeholder(root.WithOpName("x" + std::to_string(r)), DType::kF32, Shape{-1, 784});
      auto y =
          ops::Placeholder(root.WithOpName("labels" + std::to_string(r)), DType::kI32, Shape{-1});
      auto h = ops::Relu(s, ops::BiasAdd(s, ops::MatMul(s, x, w1), b1));
      auto logits = ops::BiasAdd(s, ops::MatMul(s, h, w2), b2);
      losses.push_back(
          ops::ReduceMean(s, ops::SparseSoftmaxCrossEntropyWithLogits(s, logits, y).loss));
    }
    // The mean over replicas of each half's mean is the full batch's mean.
    Output total = replicas > 1
                       ? ops::Mul(root, ops::AddN(root, losses), ops::Const(root, 1.0f / replicas))
                       : losses[0];
    loss = ops::Identity(root.WithOpName("loss"), total).name();
    ops::SGD sgd({.learning_rate = lr});
    step = sgd.Minimize(root, total, params.variables()).name();
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains two MLP replicas on cpu:0 and cpu:1 against a single-device run");
  examples::TrainFlags flags(1);
  flags.lr = 0.1;
  int64_t steps = 200;
  double tolerance = 1e-2;
  flags.AddTo(app);
  app.add_option("--steps", steps, "Training steps")->check(CLI::PositiveNumber);
  app.add_option("--tolerance", tolerance, "Largest relative loss difference allowed");
  CLI11_PARSE(app, argc, argv);
  if (flags.batch_size % 2 != 0) return Fail(InvalidArgument("--batch-size must be even"));

  if (!flags.save_batch.empty()) {
    // The replicated graph's feeds: half the batch for each replica.
    int64_t half = flags.batch_size / 2;
    Status s = examples::SaveSampleBatch(flags, [&](const Tensor& images, const Tensor& labels) {
      return Session::Feeds{{"x0", Rows(images, 0, half)},
                            {"labels0", Rows(labels, 0, half)},
                            {"x1", Rows(images, half, half)},
                            {"labels1", Rows(labels, half, half)}};
    });
    if (!s.ok()) return Fail(s);
    if (flags.save_graph.empty()) return 0;
  }
  if (!flags.save_graph.empty()) {
    // The replicated graph: replicas pinned to cpu:0 and cpu:1, the variables on cpu:0.
    Model replicated(2, flags.lr, flags.seed);
    auto nodes = examples::SaveGraphWithInit(replicated.root, replicated.params.init_targets(),
                                             flags.save_graph);
    if (!nodes.ok()) return Fail(nodes.status());
    std::printf(
        "saved the replicated training graph (%d nodes; feeds x0, labels0 on cpu:0 and x1, "
        "labels1 on cpu:1; targets 'init' and '%s', loss '%s') to %s\n",
        *nodes, replicated.step.c_str(), replicated.loss.c_str(), flags.save_graph.c_str());
    return 0;
  }

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());

  Model single(1, flags.lr, flags.seed), replicated(2, flags.lr, flags.seed);
  SessionOptions one, two;
  one.threads.num_threads = two.threads.num_threads = flags.threads;
  two.devices = {"cpu:0", "cpu:1"};
  auto s1 = Session::Create(single.root, one);
  if (!s1.ok()) return Fail(s1.status());
  auto s2 = Session::Create(replicated.root, two);
  if (!s2.ok()) return Fail(s2.status());
  for (auto* m : {&single, &replicated}) {
    Session& s = m == &single ? **s1 : **s2;
    if (Status st = s.Run({}, {}, m->params.init_targets()).status(); !st.ok()) return Fail(st);
  }
  std::printf("placement of the replicated model:\n%s\n",
              (*s2)->placement().Summary((*s2)->device_set()).c_str());

  Batcher batches(*train, flags.batch_size, flags.seed);
  batches.StartEpoch(0);
  Tensor images, labels;
  double worst = 0;
  int64_t half = flags.batch_size / 2;
  for (int64_t i = 0; i < steps; ++i) {
    if (!batches.Next(&images, &labels)) {
      batches.StartEpoch(static_cast<int>(i));
      batches.Next(&images, &labels);
    }
    auto a = (*s1)->Run({{"x0", images}, {"labels0", labels}}, {single.loss}, {single.step});
    if (!a.ok()) return Fail(a.status());
    auto b = (*s2)->Run({{"x0", Rows(images, 0, half)},
                         {"labels0", Rows(labels, 0, half)},
                         {"x1", Rows(images, half, half)},
                         {"labels1", Rows(labels, half, half)}},
                        {replicated.loss}, {replicated.step});
    if (!b.ok()) return Fail(b.status());
    double la = a->at(0).data<float>()[0], lb = b->at(0).data<float>()[0];
    worst = std::max(worst, std::abs(la - lb) / std::max(std::abs(la), 1e-12));
    if (i % 25 == 0 || i == steps - 1) {
      std::printf("step %4lld: loss one device %.6f, two replicas %.6f\n",
                  static_cast<long long>(i), la, lb);
    }
  }
  std::printf("largest relative loss difference over %lld steps: %.2e\n",
              static_cast<long long>(steps), worst);
  if (!(worst <= tolerance)) {
    std::fprintf(stderr, "error: the replicated loss drifted %.2e from the single-device loss\n",
                 worst);
    return 1;
  }
  return 0;
}
