// Blocked channel layouts: a graph rewrite that keeps the activations between convolutions in
// the layout the CPU's convolutions compute in, [N, ceil(C / b), H, W, b] (oneDNN's nChw16c or
// nChw8c), instead of reordering from and to NCHW around every convolution:
//
//   _FusedConv2D(x, w, bias)                    becomes  _BlockedConv2D(x, w, bias)
//   ... -> Add(that, r) [-> Relu]  (r blocked)   folds in  (residual r, activation)
//   ... -> Maximum(that, lo) -> Minimum(., hi)   folds in  (activation Clip [lo, hi])
//   _BlockedConv2D 1x1 -> _BlockedConv2D depthwise 3x3 (stride 1 or 2, padding 1), the 1x1's
//   output read by nothing else                  becomes  _BlockedConvDw (MobileNet's block)
//
// The element-wise ops that keep the padding channels finite (Relu, Identity, and Add, Sub,
// Mul, Maximum, Minimum of blocked tensors of one shape or of a blocked tensor and a finite
// scalar constant) run on blocked tensors as they are, MaxPool and AvgPool of a blocked tensor
// become _BlockedMaxPool and _BlockedAvgPool, and a mean over H and W that keeps its dimensions
// (GlobalAveragePool) becomes a _BlockedAvgPool of the whole image. Every other reader of a blocked
// tensor (pooling, reductions, a fetch, a Send) reads it through one _UnblockChannels; a
// convolution whose input is not blocked reads it as NCHW. The session runs this pass after
// epilogue fusion (rewrite/fusion.h) on the plans of a device whose type names a channel block
// (framework/device_type.h); fed, fetched and target nodes keep their own outputs and names.
#pragma once

#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

struct ChannelBlockStats {
  int convs = 0;            // convolutions that compute in the blocked layout
  int residuals = 0;        // of those, the ones that took a residual Add
  int clips = 0;            // and a Maximum/Minimum pair as a clip
  int elementwise = 0;      // element-wise ops that run on blocked tensors
  int pools = 0;            // MaxPool, AvgPool and global means (ReduceMean) that do
  int unblocks = 0;         // _UnblockChannels nodes added
  int depthwise_fused = 0;  // expanding 1x1 convolutions fused with the depthwise one after
};

struct BlockedGraph {
  Graph graph;
  ChannelBlockStats stats;
};

// A rewritten, validated copy of validated `graph` with channel block `block` (8 or 16). Nodes
// in `keep` are never rewritten or folded. A graph without a convolution to rewrite, or that
// takes a convolution's filter gradient (a training step, whose backward ops read the
// activations as NCHW), comes back as a copy with stats.convs == 0.
Result<BlockedGraph> BlockChannels(const Graph& graph, const std::vector<int>& keep, int block);

}  // namespace dflow::ops
