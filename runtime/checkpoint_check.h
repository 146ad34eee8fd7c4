// The check a session makes before restoring a checkpoint: nothing is set unless every variable
// of the graph can be.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

// Mirrored variables: a data-parallel replica's copy of a variable (rewrite/replicate.h) names
// the variable it copies in its `mirror_of` attribute. A checkpoint holds the original's value
// once, and restoring sets it into the original and every mirror, so a checkpoint of N replicas
// restores into any number of them.
//
// The variable node `node` of `graph` mirrors, when it names one that `graph` holds with the
// same dtype and shape; otherwise null (it is saved and restored under its own name).
const Node* MirroredVariable(const Graph& graph, const Node& node);

// The value `values` holds for variable node `node`: its own name's, else (for a mirror) its
// original's; null when neither is there. CheckRestorable said which.
const Tensor* RestoredValue(const Graph& graph, const Node& node,
                            const std::map<std::string, Tensor>& values);

// NotFound names a Variable node of `graph` that `values` (read from checkpoint `path`) lacks;
// InvalidArgument names one whose dtype or shape differs from the graph's, with the file;
// FailedPrecondition when the graph has no variables but the file has (none would be restored).
Status CheckRestorable(const Graph& graph, const std::map<std::string, Tensor>& values,
                       const std::string& path);

}  // namespace dflow
