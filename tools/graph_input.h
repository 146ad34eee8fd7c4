// The graph a tool runs or draws: a dflow graph file (.dfg, or its JSON form) or, where dflow
// was built with ONNX import, an ONNX model (.onnx: its inputs are placeholders named after the
// ONNX inputs, its outputs Identity nodes named after the ONNX outputs).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"

namespace dflow::tools {

// `assigned`, when given, receives each node's assigned device ("" when none; all "" for ONNX).
// `trainable`: an ONNX model's float initializers become variables, assigned by the target
// "init" (onnx::ImportOptions::trainable_initializers); nothing for a dflow graph file.
Result<Graph> LoadGraphFile(const std::string& path, std::vector<std::string>* assigned = nullptr,
                            bool trainable = false);

}  // namespace dflow::tools
