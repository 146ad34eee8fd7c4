// The check a session makes before restoring a checkpoint: nothing is set unless every variable
// of the graph can be.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

// NotFound names a Variable node of `graph` that `values` (read from checkpoint `path`) lacks;
// InvalidArgument names one whose dtype or shape differs from the graph's, with the file;
// FailedPrecondition when the graph has no variables but the file has (none would be restored).
Status CheckRestorable(const Graph& graph, const std::map<std::string, Tensor>& values,
                       const std::string& path);

}  // namespace dflow
