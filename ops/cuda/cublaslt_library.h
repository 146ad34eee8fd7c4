// cuBLASLt opened when a GPU's first matrix product needs it, instead of linked: the library's
// initialisers run 0.4-0.7 s at every program start, which each test, tool and worker process
// paid whether or not it touched a GPU (ctest's ~800 processes a suite spent most of their time
// there). The matrix-product kernels call it through these entry points.
#pragma once

#include <cublasLt.h>

#include <string>

#include "graph/status.h"

namespace dflow::cuda {

// The entry points of cuBLASLt that dflow calls.
struct CublasLt {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// The soname of the cuBLASLt this build was compiled against ("libcublasLt.so.13"), which the
// loader finds as it finds the program's other CUDA libraries (the run path).
std::string CublasLtSoname();

// The process's cuBLASLt, opened on the first call and kept open. FailedPrecondition naming the
// library and the loader's reason when it cannot be opened or lacks an entry point (the next call
// tries again).
Result<const CublasLt*> LoadCublasLt();

// Opens `library` (a path or a soname) on its own and reads its entry points, with the errors of
// LoadCublasLt: what LoadCublasLt does, for tests.
Result<CublasLt> OpenCublasLt(const std::string& library);

}  // namespace dflow::cuda
