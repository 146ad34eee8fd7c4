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
#include "runtime/train/trainer.h"

using namespace dflow;
using examples::Fail;

int main(int argc, char** argv) {
  CLI::App app("Trains a CNN (2 conv + 2 dense layers) on Fashion-MNIST");
  examples::TrainFlags flags(3);
  tools::Configure(app, "fashion_mnist_cnn");
  flags.AddTo(app, {.mixed_precision = true});
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;

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
  auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t seed) {
    return examples::Dense(root.WithNameScope(name), p, in, nin, nout, seed);
  };
  auto h1 = conv("conv1", image, 1, 32, flags.seed);    // [N, 32, 14, 14]
  auto h2 = conv("conv2", h1, 32, 64, flags.seed + 1);  // [N, 64, 7, 7]
  auto h3 =
      ops::Relu(root, dense("dense1", ops::Flatten(root, h2), 64 * 7 * 7, 128, flags.seed + 2));
  auto logits =
      ops::Identity(root.WithOpName("logits"), dense("dense2", h3, 128, 10, flags.seed + 3));
  return examples::TrainClassifier(root, p, logits, labels, flags, "Fashion-MNIST CNN");
}
