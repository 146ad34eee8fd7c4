#include "ops/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <mutex>

namespace dflow::cuda {
namespace {

#define DFLOW_STRINGIFY_(x) #x
#define DFLOW_STRINGIFY(x) DFLOW_STRINGIFY_(x)

// Reads entry point `name` of the open library `handle` into `fn`.
template <typename Fn>
Status Read(void* handle, const std::string& library, const char* name, Fn* fn) {
  dlerror();
  void* found = dlsym(handle, name);
  if (found == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cuBLASLt library '{}' has no {}: {}", library, name,
                              why != nullptr ? why : "null symbol");
  }
  *fn = reinterpret_cast<Fn>(found);
  return Status::OK();
}

}  // namespace

std::string CublasLtSoname() { return "libcublasLt.so." DFLOW_STRINGIFY(CUBLAS_VER_MAJOR); }

Result<CublasLt> OpenCublasLt(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cannot open cuBLASLt library '{}' (GPU matrix products need it): {}",
                              library, why != nullptr ? why : "unknown reason");
  }
  CublasLt lt{};
  Status s = Read(handle, library, "cublasLtCreate", &lt.Create);
  if (s.ok()) s = Read(handle, library, "cublasLtMatmul", &lt.Matmul);
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatmulAlgoGetHeuristic", &lt.MatmulAlgoGetHeuristic);
  }
  if (s.ok()) s = Read(handle, library, "cublasLtMatmulDescCreate", &lt.MatmulDescCreate);
  if (s.ok()) s = Read(handle, library, "cublasLtMatmulDescDestroy", &lt.MatmulDescDestroy);
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatmulDescSetAttribute", &lt.MatmulDescSetAttribute);
  }
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatmulPreferenceCreate", &lt.MatmulPreferenceCreate);
  }
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatmulPreferenceDestroy", &lt.MatmulPreferenceDestroy);
  }
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatmulPreferenceSetAttribute",
             &lt.MatmulPreferenceSetAttribute);
  }
  if (s.ok()) s = Read(handle, library, "cublasLtMatrixLayoutCreate", &lt.MatrixLayoutCreate);
  if (s.ok()) s = Read(handle, library, "cublasLtMatrixLayoutDestroy", &lt.MatrixLayoutDestroy);
  if (s.ok()) {
    s = Read(handle, library, "cublasLtMatrixLayoutSetAttribute", &lt.MatrixLayoutSetAttribute);
  }
  if (!s.ok()) {
    dlclose(handle);
    return s;
  }
  return lt;  // the handle stays open: the entry points live in it
}

Result<const CublasLt*> LoadCublasLt() {
  static std::mutex mu;
  static const CublasLt* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded == nullptr) {
    ASSIGN_OR_RETURN(CublasLt lt, OpenCublasLt(CublasLtSoname()));
    loaded = new CublasLt(lt);
  }
  return loaded;
}

}  // namespace dflow::cuda
