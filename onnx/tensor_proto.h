// ONNX TensorProtos (initializers, Constant values, test data) as dflow tensors.
#pragma once

#include <string>

#include "graph/dtype.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "onnx/onnx_headers.h"

namespace dflow::onnx {

// The dflow dtype of an ONNX TensorProto data type; Unimplemented naming the ONNX type when
// dflow has none (int8, uint16, string, complex, ...).
Result<DType> DTypeOfOnnx(int32_t onnx_type);
// The ONNX data type of a dflow dtype.
int32_t OnnxTypeOf(DType dtype);

// `proto` as a tensor. Its values come from raw_data, the typed fields or external data, which
// is read only from a file under `model_dir` (a relative path without "..", not leaving the
// folder through a link), bounded by and checked against the size the dims declare.
// InvalidArgument naming `what` (the initializer, the node) for sizes that do not match, a
// negative dimension, more than 2^31 elements; Unimplemented for a dtype dflow lacks.
Result<Tensor> FromTensorProto(const ::onnx::TensorProto& proto, const std::string& model_dir,
                               const std::string& what);

// `tensor` (host memory) as a TensorProto named `name`, its values in raw_data (little-endian).
// InvalidArgument naming `name` for a dtype ONNX is not given here.
Result<::onnx::TensorProto> ToTensorProto(const Tensor& tensor, const std::string& name);

}  // namespace dflow::onnx
