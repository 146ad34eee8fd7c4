// ONNX models as dflow graphs.
//
//   auto model = onnx::ImportModel("resnet50.onnx");
//   auto session = Session::Create(model->graph);
//   auto out = (*session)->Run({{model->inputs[0], images}}, {model->outputs[0]});
//
// The file is parsed (protobuf, at most `max_model_bytes`), checked by ONNX's checker and its
// shape inference runs, then every node becomes dflow ops. What dflow cannot run (an op it does
// not import, another domain, control flow, sequences, a dtype it lacks, an attribute value it
// does not support) is refused with InvalidArgument or Unimplemented naming the node, its op and
// the opset; nothing is dropped. Every byte of the file is untrusted input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow::onnx {

struct ImportOptions {
  // Files larger than this are refused before they are read.
  size_t max_model_bytes = size_t{2} << 30;
  // The float32 initializers (but BatchNormalization's running statistics) become Variables,
  // initialized with their values by the NoOp `ImportedModel::init`, so the model trains with
  // dflow's gradients and optimizers. Otherwise they are constants (and nodes computing only
  // from constants are folded at import).
  bool trainable_initializers = false;
  // The name of that NoOp ("init_op" when the model has a node of this name, and so on); empty:
  // none is added, for a program that runs ImportedModel::assigns with its own initialization.
  std::string init_op = "init";
};

struct ImportedModel {
  Graph graph;
  // The placeholders of the model's inputs (initializers excluded), in the model's order: their
  // names are the ONNX names with ':' made '_'.
  std::vector<std::string> inputs;
  // The tensors of the model's outputs, in order, each an Identity named after the ONNX output
  // (':' made '_'): fetch these.
  std::vector<std::string> outputs;
  // With trainable_initializers: the Variables (outputs "NAME:0", NAME the initializer's name
  // with ':' made '_'), those the graph reads, in the order it reads them; the Assigns of their
  // initial values (outputs, in the same order); and the NoOp that runs them all: run it once
  // before anything else. Empty otherwise.
  std::vector<std::string> variables;
  std::vector<std::string> assigns;
  std::string init;
  int64_t opset = 0;  // of the default domain
  int64_t ir_version = 0;
};

Result<ImportedModel> ImportModel(const std::string& path, const ImportOptions& options = {});

// The same from the bytes of a model file; `name` names it in errors, `dir` is its folder (for
// external data).
Result<ImportedModel> ImportModelBytes(std::string_view bytes, const std::string& name,
                                       const std::string& dir, const ImportOptions& options = {});

// A serialized TensorProto (the ONNX test data's input_N.pb and output_N.pb) as a tensor.
Result<Tensor> ReadTensorFile(const std::string& path);

// The ONNX ops the importer maps to dflow ops, sorted.
std::vector<std::string> ImportedOps();

}  // namespace dflow::onnx
