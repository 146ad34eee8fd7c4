#include "tools/graph_input.h"

#include "dflow/version.h"
#include "serialization/graph_file.h"
#if DFLOW_HAS_ONNX
#include "onnx/onnx_import.h"
#endif

namespace dflow::tools {

Result<Graph> LoadGraphFile(const std::string& path, std::vector<std::string>* assigned,
                            bool trainable) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0) {
#if DFLOW_HAS_ONNX
    ASSIGN_OR_RETURN(onnx::ImportedModel model,
                     onnx::ImportModel(path, {.trainable_initializers = trainable}));
    if (assigned != nullptr) assigned->assign(model.graph.num_nodes(), "");
    return std::move(model.graph);
#else
    (void)trainable;
    return Unimplemented("'{}': this dflow was built without ONNX import (libonnx-dev)", path);
#endif
  }
  return serialization::LoadGraph(path, assigned);
}

}  // namespace dflow::tools
