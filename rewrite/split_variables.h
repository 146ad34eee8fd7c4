// Row blocks: a rewrite that splits big variables, with the optimizer state their update reads,
// into blocks of rows, so that parameter servers (rewrite/replicate.h) can share one variable's
// bytes and its update's work. The rewritten graph computes what the original does:
//   - a split variable V [R, ...] becomes variables "V/part0" .. "V/partK-1", each a band of
//     rows, and a Concat named V gives the whole value to every reader (fetching V still works;
//     checkpoints hold the parts);
//   - the variables of V's group (those one update reads: Adam's m and v) are split alike, and a
//     scalar of the group (Adam's step count) is copied into each block;
//   - every initializer and update of the group (Assign, ApplySGD, ApplyMomentum, ApplyAdam,
//     ApplyAdamW, all elementwise) becomes one per block, given its band of rows of each input
//     with V's shape (the gradient, an initial value).
// Every split node's name stays, for fetches and targets: a Concat of the blocks' outputs, or
// an Identity of the first block's scalar after all blocks.
// A group is split only when it is over `max_bytes`, its variables all have the largest one's
// shape or one element, that shape has rank >= 1 and 2 or more rows, and nothing but those
// updates changes them; it is split into ceil(bytes / max_bytes) blocks (at most one per row)
// of nearly equal rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace dflow::ops {

// The variables of `graph` grouped with the others a stateful node reads with them: each
// Variable node's id -> the id of its group's representative (variables no stateful node
// reads are their own).
std::map<int, int> VariableGroups(const Graph& graph);

struct SplitVariables {
  Graph graph;                           // validated
  std::map<std::string, int> blocks;     // split variable (slots too) -> its number of blocks
  std::vector<std::string> whole_reads;  // the Concats that stand for split variables
};

// `graph` must be validated. Errors: InvalidArgument for max_bytes <= 0.
Result<SplitVariables> SplitVariablesIntoRowBlocks(const Graph& graph, int64_t max_bytes);

}  // namespace dflow::ops
