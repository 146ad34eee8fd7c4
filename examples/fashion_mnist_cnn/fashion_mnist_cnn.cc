// Trains a small CNN on Fashion-MNIST with Adam and prints the test accuracy after every epoch:
// conv 3x3 (32) -> relu -> maxpool 2 -> conv 3x3 (64) -> relu -> maxpool 2 -> dense 128 -> relu
// -> dense 10. --min-accuracy makes the program fail when the final accuracy falls short.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/trainer.h"

using namespace dflow;
using examples::Fail;

int main(int argc, char** argv) {
  CLI::App app("Trains a CNN (2 conv + 2 dense layers) on Fashion-MNIST");
  int epochs = 3;
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
  examples::Params p;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto image = ops::Reshape(root, x, {-1, 1, 28, 28});
  auto conv = [&](const std::string& name, Output in, int64_t cin, int64_t cout, uint64_t s) {
    Scope sc = root.WithNameScope(name);
    Output w = p.Add(sc.WithOpName("w"), Shape{cout, cin, 3, 3}, ops::Initializer::HeNormal(s));
    Output b = p.Add(sc.WithOpName("b"), Shape{1, cout, 1, 1}, ops::Initializer::Zeros());
    Output y = ops::Add(sc, ops::Conv2D(sc, in, w, {.pads = {1, 1, 1, 1}}), b);
    return ops::MaxPool(sc, ops::Relu(sc, y));
  };
  auto dense = [&](const std::string& name, Output in, int64_t nin, int64_t nout, uint64_t s) {
    Scope sc = root.WithNameScope(name);
    Output w = p.Add(sc.WithOpName("w"), Shape{nin, nout}, ops::Initializer::GlorotUniform(s));
    Output b = p.Add(sc.WithOpName("b"), Shape{nout}, ops::Initializer::Zeros());
    return ops::BiasAdd(sc, ops::MatMul(sc, in, w), b);
  };
  auto h1 = conv("conv1", image, 1, 32, seed);    // [N, 32, 14, 14]
  auto h2 = conv("conv2", h1, 32, 64, seed + 1);  // [N, 64, 7, 7]
  auto h3 = ops::Relu(root, dense("dense1", ops::Flatten(root, h2), 64 * 7 * 7, 128, seed + 2));
  auto logits = ops::Identity(root.WithOpName("logits"), dense("dense2", h3, 128, 10, seed + 3));
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = lr});
  auto step = adam.Minimize(root, loss, p.variables());

  SessionOptions options;
  options.threads.num_threads = threads;
  auto session = Session::Create(root, options);
  if (!session.ok()) return Fail(session.status());
  std::vector<std::string> init = adam.init_targets();
  for (const auto& t : p.init_targets()) init.push_back(t);
  if (Status s = (*session)->Run({}, {}, init).status(); !s.ok()) return Fail(s);

  std::printf("Fashion-MNIST CNN: %lld training and %lld test images, batch %lld\n",
              static_cast<long long>(train->size()), static_cast<long long>(test->size()),
              static_cast<long long>(batch_size));
  return examples::TrainAndReport(**session, *train, *test,
                                  {.epochs = epochs,
                                   .batch_size = batch_size,
                                   .max_steps = max_steps,
                                   .seed = seed,
                                   .min_accuracy = min_accuracy,
                                   .loss = loss.name(),
                                   .train_target = step.name(),
                                   .logits = logits.name()});
}
