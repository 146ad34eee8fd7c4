// Shapes and tensors to and from their FlatBuffers tables (schema/common.fbs), checking what a
// file says before trusting it: a known dtype, at most Shape::kMaxRank dims each >= -1, and
// exactly as many data bytes as dtype and shape call for (so a hostile size never allocates).
#pragma once

#include <string>

#include "graph/tensor.h"
#include "serialization/schema/common_generated.h"
#include "serialization/where.h"

namespace dflow::serialization {

flatbuffers::Offset<fb::Shape> EncodeShape(flatbuffers::FlatBufferBuilder& b, const Shape& s);
// REQUIRES: t is valid and host-accessible.
flatbuffers::Offset<fb::Tensor> EncodeTensor(flatbuffers::FlatBufferBuilder& b, const Tensor& t);
// The same around `data`, a byte vector already in `b` that holds (or will hold) t's bytes.
flatbuffers::Offset<fb::Tensor> EncodeTensorAround(
    flatbuffers::FlatBufferBuilder& b, const Tensor& t,
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> data);

// Errors are InvalidArgument "<where>: ..." (where names the file and the node or variable; it
// is formatted only on error).
Result<DType> DecodeDType(fb::DType d, const Where& where);
Result<Shape> DecodeShape(const fb::Shape* s, const Where& where);
Result<Tensor> DecodeTensor(const fb::Tensor* t, const Where& where);

}  // namespace dflow::serialization
