// NumPy .npy files: one tensor each, as dflow-run reads feeds and writes fetches.
//
// Reads format versions 1.0, 2.0 and 3.0; writes 1.0 (2.0 when the header needs it), as
// numpy.save does. Little-endian ('<', or '|' for single bytes) data in C order only: a
// big-endian or Fortran-ordered file is an InvalidArgument that says so. dtypes: '<f4' f32,
// '<f8' f64, '<f2' f16, '<i4' i32, '<i8' i64, '|u1' u8, '|b1' bool (NumPy has no bfloat16).
// Files are untrusted: the data must be exactly as long as dtype and shape say.
#pragma once

#include <string>
#include <string_view>

#include "graph/tensor.h"

namespace dflow::serialization {

Result<Tensor> DecodeNpy(std::string_view bytes, const std::string& source);
Result<Tensor> ReadNpy(const std::string& path);
// InvalidArgument for a dtype NumPy lacks (bf16). REQUIRES: t valid and host-accessible.
Result<std::string> EncodeNpy(const Tensor& t);
Status WriteNpy(const Tensor& t, const std::string& path);

}  // namespace dflow::serialization
