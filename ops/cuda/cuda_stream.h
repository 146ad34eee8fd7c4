// CudaStream: CUDA's opaque stream handle (cudaStream_t) without a CUDA header, so that C++
// files and nvcc-built launches (ops/cuda/launch.h) name streams alike. Nothing here includes
// fmt or the tensor headers, which nvcc does not build.
#pragma once

struct CUstream_st;  // CUDA's own (global) name, as cuda_runtime.h declares it

namespace dflow {

using CudaStream = ::CUstream_st*;

}  // namespace dflow
