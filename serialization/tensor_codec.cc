#include "serialization/tensor_codec.h"

#include <cstring>

#include "serialization/verified_root.h"

namespace dflow::serialization {

static_assert(static_cast<int>(fb::DType::MAX) + 1 == kNumDTypes,
              "schema/common.fbs DType must list dflow::DType in order");

flatbuffers::Offset<fb::Shape> EncodeShape(flatbuffers::FlatBufferBuilder& b, const Shape& s) {
  auto dims = b.CreateVector(s.dims().data(), s.dims().size());
  return fb::CreateShape(b, dims, s.unknown_rank());
}

flatbuffers::Offset<fb::Tensor> EncodeTensor(flatbuffers::FlatBufferBuilder& b, const Tensor& t) {
  auto data = b.CreateVector(static_cast<const uint8_t*>(t.raw_data()), t.num_bytes());
  return EncodeTensorAround(b, t, data);
}

flatbuffers::Offset<fb::Tensor> EncodeTensorAround(
    flatbuffers::FlatBufferBuilder& b, const Tensor& t,
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> data) {
  auto shape = EncodeShape(b, t.shape());
  return fb::CreateTensor(b, static_cast<fb::DType>(t.dtype()), shape, data);
}

Result<DType> DecodeDType(fb::DType d, const Where& where) {
  auto v = static_cast<int>(d);
  if (v <= 0 || v >= kNumDTypes) return InvalidArgument("{}: unknown dtype {}", where.str(), v);
  return static_cast<DType>(v);
}

Result<Shape> DecodeShape(const fb::Shape* s, const Where& where) {
  if (s == nullptr) return InvalidArgument("{}: a shape is missing", where.str());
  if (s->unknown_rank()) return Shape::Unknown();
  if (s->dims() == nullptr) return Shape{};
  std::vector<int64_t> dims = ScalarsOf(s->dims());
  auto shape = Shape::Make(dims);
  if (!shape.ok()) return shape.status().WithPrefix(where.str() + ": ");
  return shape;
}

Result<Tensor> DecodeTensor(const fb::Tensor* t, const Where& where) {
  if (t == nullptr) return InvalidArgument("{}: a tensor is missing", where.str());
  ASSIGN_OR_RETURN(DType dtype, DecodeDType(t->dtype(), where));
  ASSIGN_OR_RETURN(Shape shape, DecodeShape(t->shape(), where));
  if (!shape.fully_defined()) {
    return InvalidArgument("{}: a tensor's shape must be fully defined, got {}", where.str(),
                           shape);
  }
  // The element count, refusing overflow: a hostile file may declare huge dims.
  uint64_t bytes = static_cast<uint64_t>(DTypeSize(dtype));
  for (int64_t d : shape.dims()) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      return InvalidArgument("{}: tensor of shape {} is too large", where.str(), shape);
    }
  }
  size_t have = t->data() == nullptr ? 0 : t->data()->size();
  if (bytes != have) {
    return InvalidArgument("{}: a {} tensor of shape {} needs {} bytes of data, the file has {}",
                           where.str(), DTypeName(dtype), shape, bytes, have);
  }
  Tensor out(dtype, shape);
  if (have > 0) std::memcpy(out.raw_data(), t->data()->data(), have);
  return out;
}

}  // namespace dflow::serialization
