// ResNet (He et al., 2015) with bottleneck blocks, built with the builder API, for CIFAR-10
// shapes: [N, 3, 32, 32] images, a 3x3 stride-1 stem and no max pool (the usual CIFAR variant),
// four stages of bottlenecks (1x1 reduce, 3x3, 1x1 expand by 4, batch norm after each conv,
// projection shortcut where the shape changes), global average pooling and a dense layer.
// Depth 50 is ResNet-50: 3, 4, 6 and 3 blocks. Shared by examples/resnet50 and bench/.
#pragma once

#include <string>
#include <vector>

#include "examples/common/example_util.h"
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"

namespace dflow::examples {

struct ResNetConfig {
  int depth = 50;      // 50, 101 or 152
  int64_t width = 64;  // channels of the first stage's 3x3 convs (64 in the paper)
  int64_t classes = 10;
  uint64_t seed = 1;
};

// The bottleneck blocks per stage of a depth; empty for depths other than 50, 101 and 152.
inline std::vector<int> ResNetStages(int depth) {
  switch (depth) {
    case 50:
      return {3, 4, 6, 3};
    case 101:
      return {3, 4, 23, 3};
    case 152:
      return {3, 8, 36, 3};
    default:
      return {};
  }
}

struct ResNetModel {
  Output logits;  // [N, classes]
  // Trainable parameters (conv filters, batch norm scales and offsets, the dense layer).
  Params params;
  // The batch norms' running mean and variance (not trained; updated by `stat_updates`).
  Params running_stats;
  // The Assigns of the running statistics: run them with every training step.
  std::vector<Output> stat_updates;
};

// Builds the network on `images` ([N, 3, 32, 32] f32) in `root`. A depth without a stage table
// is an InvalidArgument recorded in the scope.
inline ResNetModel BuildResNet(const Scope& root, Output images, const ResNetConfig& c) {
  ResNetModel m;
  std::vector<int> stages = ResNetStages(c.depth);
  if (stages.empty()) {
    root.UpdateStatus(
        InvalidArgument("ResNet depth {} has no bottleneck stage table (50, 101 or 152)", c.depth));
    return m;
  }
  uint64_t seed = c.seed;
  // conv (no bias) -> batch norm -> optional ReLU.
  auto conv_bn = [&](const Scope& s, Output in, int64_t cin, int64_t cout, int64_t k,
                     int64_t stride, bool relu) {
    Output w =
        m.params.Add(s.WithOpName("w"), Shape{cout, cin, k, k}, ops::Initializer::HeNormal(seed++));
    int64_t pad = k / 2;
    Output y = ops::Conv2D(s, in, w, {.strides = {stride, stride}, .pads = {pad, pad, pad, pad}});
    Output scale = m.params.Add(s.WithOpName("scale"), Shape{cout}, ops::Initializer::Constant(1));
    Output offset = m.params.Add(s.WithOpName("offset"), Shape{cout}, ops::Initializer::Zeros());
    Output mean =
        m.running_stats.Add(s.WithOpName("running_mean"), Shape{cout}, ops::Initializer::Zeros());
    Output var = m.running_stats.Add(s.WithOpName("running_var"), Shape{cout},
                                     ops::Initializer::Constant(1));
    ops::BatchNormOutputs bn = ops::BatchNorm(s, y, scale, offset);
    for (Output u : ops::UpdateRunningStats(s, bn, y, mean, var)) m.stat_updates.push_back(u);
    return relu ? ops::Relu(s, bn.y) : bn.y;
  };

  Output h = conv_bn(root.WithNameScope("stem"), images, 3, c.width, 3, 1, true);
  int64_t channels = c.width;
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const int64_t mid = c.width << stage, out = mid * 4;
    for (int block = 0; block < stages[stage]; ++block) {
      Scope s = root.WithNameScope(fmt::format("stage{}/block{}", stage + 1, block + 1));
      const int64_t stride = (block == 0 && stage > 0) ? 2 : 1;
      Output r = conv_bn(s.WithNameScope("reduce"), h, channels, mid, 1, 1, true);
      r = conv_bn(s.WithNameScope("conv"), r, mid, mid, 3, stride, true);
      r = conv_bn(s.WithNameScope("expand"), r, mid, out, 1, 1, false);
      Output shortcut = h;
      if (stride != 1 || channels != out) {
        shortcut = conv_bn(s.WithNameScope("project"), h, channels, out, 1, stride, false);
      }
      h = ops::Relu(s, ops::Add(s, r, shortcut));
      channels = out;
    }
  }
  Output pooled = ops::Flatten(root, ops::GlobalAvgPool(root, h));  // [N, channels]
  m.logits = ops::Identity(root.WithOpName("logits"), Dense(root.WithNameScope("fc"), m.params,
                                                            pooled, channels, c.classes, seed++));
  return m;
}

}  // namespace dflow::examples
