#include "onnx/tensor_proto.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "serialization/file_util.h"

namespace dflow::onnx {
namespace {

using ::onnx::TensorProto;

constexpr int64_t kMaxElements = int64_t{1} << 31;

// The external data file's bytes [offset, offset + length) for `proto`.
Result<std::string> ExternalBytes(const TensorProto& proto, const std::string& model_dir,
                                  const std::string& what, size_t expected) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (errno != 0 || end == kv.value().c_str() || *end != '\0' || v < 0) {
        return InvalidArgument("{}: external data {} '{}' is not a byte count", what, kv.key(),
                               kv.value());
      }
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  namespace fs = std::filesystem;
  if (location.empty()) return InvalidArgument("{}: external data without a location", what);
  const fs::path rel(location);
  if (rel.is_absolute()) {
    return InvalidArgument(
        "{}: external data location '{}' is absolute; it must lie in the "
        "model's folder",
        what, location);
  }
  for (const auto& part : rel) {
    if (part == "..") {
      return InvalidArgument("{}: external data location '{}' leaves the model's folder", what,
                             location);
    }
  }
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(model_dir.empty() ? "." : model_dir, ec);
  const fs::path file = fs::weakly_canonical(dir / rel, ec);
  if (ec) return NotFound("{}: external data '{}': {}", what, location, ec.message());
  auto [end, _] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
  if (end != dir.end()) {
    return InvalidArgument("{}: external data '{}' leads out of the model's folder (to {})", what,
                           location, file.string());
  }
  if (length >= 0 && static_cast<size_t>(length) != expected) {
    return InvalidArgument("{}: external data '{}' has length {} but the dims need {} bytes", what,
                           location, length, expected);
  }
  ASSIGN_OR_RETURN(std::string bytes, serialization::ReadFile(file.string()));
  if (static_cast<size_t>(offset) > bytes.size() || bytes.size() - offset < expected) {
    return InvalidArgument("{}: external data '{}' holds {} bytes; offset {} and {} bytes needed",
                           what, location, bytes.size(), offset, expected);
  }
  return bytes.substr(static_cast<size_t>(offset), expected);
}

template <typename T, typename Field>
Status CopyTyped(const Field& field, Tensor& t, const std::string& what, const char* name) {
  if (static_cast<int64_t>(field.size()) != t.num_elements()) {
    return InvalidArgument("{}: {} holds {} values but the dims give {}", what, name, field.size(),
                           t.num_elements());
  }
  T* out = static_cast<T*>(t.raw_data());
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
  return Status::OK();
}

}  // namespace

Result<DType> DTypeOfOnnx(int32_t onnx_type) {
  switch (onnx_type) {
    case TensorProto::FLOAT:
      return DType::kF32;
    case TensorProto::DOUBLE:
      return DType::kF64;
    case TensorProto::FLOAT16:
      return DType::kF16;
    case TensorProto::BFLOAT16:
      return DType::kBF16;
    case TensorProto::INT32:
      return DType::kI32;
    case TensorProto::INT64:
      return DType::kI64;
    case TensorProto::UINT8:
      return DType::kU8;
    case TensorProto::BOOL:
      return DType::kBool;
    default: {
      const char* name = TensorProto::DataType_IsValid(onnx_type)
                             ? TensorProto::DataType_Name(onnx_type).c_str()
                             : "an unknown type";
      return Unimplemented("dtype {} ({}): dflow has no such dtype", name, onnx_type);
    }
  }
}

int32_t OnnxTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return TensorProto::FLOAT;
    case DType::kF64:
      return TensorProto::DOUBLE;
    case DType::kF16:
      return TensorProto::FLOAT16;
    case DType::kBF16:
      return TensorProto::BFLOAT16;
    case DType::kI32:
      return TensorProto::INT32;
    case DType::kI64:
      return TensorProto::INT64;
    case DType::kU8:
      return TensorProto::UINT8;
    case DType::kBool:
      return TensorProto::BOOL;
    default:
      return TensorProto::UNDEFINED;
  }
}

Result<Tensor> FromTensorProto(const TensorProto& proto, const std::string& model_dir,
                               const std::string& what) {
  auto dtype = DTypeOfOnnx(proto.data_type());
  if (!dtype.ok()) return dtype.status().WithPrefix(what + ": ");
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0) return InvalidArgument("{}: negative dimension {}", what, d);
    if (d > 0 && n > kMaxElements / d) {
      return InvalidArgument("{}: more than {} elements", what, kMaxElements);
    }
    n *= d;
    dims.push_back(d);
  }
  // Every size is checked against the bytes there are before anything is allocated: the dims
  // of a hostile file may claim gigabytes.
  const Shape shape{std::span<const int64_t>(dims)};
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(*dtype);
  if (proto.data_location() == TensorProto::EXTERNAL) {
    ASSIGN_OR_RETURN(std::string data, ExternalBytes(proto, model_dir, what, bytes));
    Tensor t(*dtype, shape);
    if (bytes > 0) std::memcpy(t.raw_data(), data.data(), bytes);
    return t;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      return InvalidArgument("{}: raw_data holds {} bytes but {} {} values need {}", what,
                             proto.raw_data().size(), n, DTypeName(*dtype), bytes);
    }
    Tensor t(*dtype, shape);
    if (bytes > 0) std::memcpy(t.raw_data(), proto.raw_data().data(), bytes);
    return t;
  }
  int64_t given = 0;
  switch (*dtype) {
    case DType::kF32:
      given = proto.float_data_size();
      break;
    case DType::kF64:
      given = proto.double_data_size();
      break;
    case DType::kI64:
      given = proto.int64_data_size();
      break;
    default:
      given = proto.int32_data_size();
  }
  if (given != n) {
    return InvalidArgument("{}: {} values given but the dims {} need {}", what, given, shape, n);
  }
  Tensor t(*dtype, shape);
  switch (*dtype) {
    case DType::kF32:
      RETURN_IF_ERROR(CopyTyped<float>(proto.float_data(), t, what, "float_data"));
      break;
    case DType::kF64:
      RETURN_IF_ERROR(CopyTyped<double>(proto.double_data(), t, what, "double_data"));
      break;
    case DType::kI64:
      RETURN_IF_ERROR(CopyTyped<int64_t>(proto.int64_data(), t, what, "int64_data"));
      break;
    case DType::kI32:
      RETURN_IF_ERROR(CopyTyped<int32_t>(proto.int32_data(), t, what, "int32_data"));
      break;
    case DType::kU8:
      RETURN_IF_ERROR(CopyTyped<uint8_t>(proto.int32_data(), t, what, "int32_data"));
      break;
    case DType::kBool:
      RETURN_IF_ERROR(CopyTyped<bool>(proto.int32_data(), t, what, "int32_data"));
      break;
    case DType::kF16:
    case DType::kBF16:  // 16-bit patterns in int32_data
      RETURN_IF_ERROR(CopyTyped<uint16_t>(proto.int32_data(), t, what, "int32_data"));
      break;
    default:
      return Internal("{}: no reader for {}", what, DTypeName(*dtype));
  }
  return t;
}

Result<TensorProto> ToTensorProto(const Tensor& tensor, const std::string& name) {
  const int32_t type = OnnxTypeOf(tensor.dtype());
  if (type == TensorProto::UNDEFINED) {
    return InvalidArgument("'{}': dtype {} has no ONNX form here", name, DTypeName(tensor.dtype()));
  }
  TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(type);
  for (int i = 0; i < tensor.shape().rank(); ++i) proto.add_dims(tensor.shape()[i]);
  if (tensor.num_bytes() > 0) {
    proto.set_raw_data(static_cast<const char*>(tensor.raw_data()), tensor.num_bytes());
  }
  return proto;
}

}  // namespace dflow::onnx
