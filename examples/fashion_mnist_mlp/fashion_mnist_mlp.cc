// Trains a 784-512-512-10 MLP on Fashion-MNIST with Adam and prints the test accuracy after
// every epoch. --min-accuracy makes the program fail when the final accuracy falls short.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/trainer.h"

using namespace dflow;

namespace {

struct Layer {
  ops::VariableAndInit w, b;
};

Layer Dense(const Scope& scope, int64_t in, int64_t out, uint64_t seed) {
  return {ops::InitializedVariable(scope.WithOpName("w"), Shape{in, out},
                                   ops::Initializer::GlorotUniform(seed)),
          ops::InitializedVariable(scope.WithOpName("b"), Shape{out}, ops::Initializer::Zeros())};
}

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains an MLP (784-512-512-10) on Fashion-MNIST");
  int epochs = 10;
  int64_t batch_size = 128, max_steps = -1;
  double lr = 1e-3, min_accuracy = 0;
  uint64_t seed = 1;
  int threads = 0;
  std::string data_dir = kFashionMnistDir;
  app.add_option("--epochs", epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "Examples per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Seed for initialisation and shuffling");
  app.add_option("--max-steps", max_steps,
                 "Stop each epoch after this many steps (shortened runs)");
  app.add_option("--min-accuracy", min_accuracy, "Exit with status 1 below this test accuracy");
  app.add_option("--threads", threads, "CPU threads (0: all cores)");
  app.add_option("--data", data_dir, "Folder with the Fashion-MNIST IDX files");
  CLI11_PARSE(app, argc, argv);

  auto train = LoadFashionMnist(true, data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, data_dir);
  if (!test.ok()) return Fail(test.status());

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  Layer l1 = Dense(root.WithNameScope("dense1"), 784, 512, seed);
  Layer l2 = Dense(root.WithNameScope("dense2"), 512, 512, seed + 1);
  Layer l3 = Dense(root.WithNameScope("dense3"), 512, 10, seed + 2);
  auto h1 = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, l1.w.var), l1.b.var));
  auto h2 = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, h1, l2.w.var), l2.b.var));
  auto logits = ops::BiasAdd(root.WithOpName("logits"), ops::MatMul(root, h2, l3.w.var), l3.b.var);
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = lr});
  auto step =
      adam.Minimize(root, loss, {l1.w.var, l1.b.var, l2.w.var, l2.b.var, l3.w.var, l3.b.var});

  SessionOptions options;
  options.threads.num_threads = threads;
  auto session = Session::Create(root, options);
  if (!session.ok()) return Fail(session.status());
  std::vector<std::string> init = adam.init_targets();
  for (const Layer* l : {&l1, &l2, &l3}) {
    init.push_back(l->w.init.node_name());
    init.push_back(l->b.init.node_name());
  }
  if (Status s = (*session)->Run({}, {}, init).status(); !s.ok()) return Fail(s);

  std::printf("Fashion-MNIST MLP 784-512-512-10: %lld training and %lld test images, batch %lld\n",
              static_cast<long long>(train->size()), static_cast<long long>(test->size()),
              static_cast<long long>(batch_size));
  Batcher batches(*train, batch_size, seed);
  double accuracy = 0;
  Status s = TrainLoop(**session, batches,
                       {.epochs = epochs,
                        .loss = loss.name(),
                        .train_target = step.name(),
                        .max_steps_per_epoch = max_steps},
                       [&](const EpochStats& e) -> Status {
                         ASSIGN_OR_RETURN(accuracy, Accuracy(**session, *test, "x", logits.name()));
                         std::printf(
                             "epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, "
                             "%.0f examples/s, median step %.2f ms\n",
                             e.epoch, e.mean_loss, 100 * accuracy, e.seconds, e.examples_per_second,
                             e.median_step_ms);
                         std::fflush(stdout);
                         return Status::OK();
                       });
  if (!s.ok()) return Fail(s);
  if (accuracy < min_accuracy) {
    std::fprintf(stderr, "error: test accuracy %.2f%% is below the required %.2f%%\n",
                 100 * accuracy, 100 * min_accuracy);
    return 1;
  }
  return 0;
}
