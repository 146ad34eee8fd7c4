// A dflow graph's inference part as an ONNX model, for ONNX Runtime and the rest of the
// ecosystem:
//
//   RETURN_IF_ERROR(onnx::ExportModel(*session, {"logits:0"}, "mlp.onnx"));
//
// What is written is what the fetched tensors depend on: placeholders become the model's inputs
// (dimensions unknown until run time become symbolic), constants its initializers, variables
// initializers holding the values they have in the session, and every other node the ONNX ops
// that compute the same (opset 17). A node with no ONNX form here (a training op, an optimizer
// update, Send/Recv, ...) is refused naming the node and its op; the model is checked by ONNX's
// checker before it is written.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "runtime/session.h"

namespace dflow::onnx {

struct ExportOptions {
  std::string graph_name = "dflow";
};

// The model computing `outputs` ("NODE" or "NODE:INDEX") of `graph`, serialized. The ONNX inputs
// are named after the placeholders, the outputs after the fetched tensors ("NODE" for output 0,
// "NODE:INDEX" otherwise); `variable_value` gives a Variable's value by node name.
Result<std::string> ExportModelBytes(
    const Graph& graph, const std::vector<std::string>& outputs,
    const std::function<Result<Tensor>(const std::string& variable)>& variable_value,
    const ExportOptions& options = {});

// The same from `session`'s graph and variables, written to `path` (atomically).
Status ExportModel(Session& session, const std::vector<std::string>& outputs,
                   const std::string& path, const ExportOptions& options = {});

// The dflow ops the exporter writes, sorted.
std::vector<std::string> ExportedOps();

}  // namespace dflow::onnx
