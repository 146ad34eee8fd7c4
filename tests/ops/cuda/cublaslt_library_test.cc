// cuBLASLt opened on first use (ops/cuda/cublaslt_library.h): a program that links dflow does not
// load it at start, the first load finds this build's library and every entry point, and a
// library that is missing or is not cuBLASLt is refused naming it. Runs without a GPU.
#include "ops/cuda/cublaslt_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace dflow::cuda {
namespace {

using testing::MessageHas;

// Whether the library was in the process when its static initialisers ran, before any test.
const bool kLoadedAtStart = [] {
  void* h = dlopen(CublasLtSoname().c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}();

TEST(CublasLtLibraryTest, NotLoadedWhenTheProgramStarts) {
  EXPECT_EQ(CublasLtSoname(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  EXPECT_FALSE(kLoadedAtStart);
}

TEST(CublasLtLibraryTest, TheFirstLoadFindsEveryEntryPoint) {
  auto lt = LoadCublasLt();
  ASSERT_TRUE(lt.ok()) << lt.status().ToString();
  const CublasLt& f = **lt;
  for (const void* p :
       {reinterpret_cast<const void*>(f.Create), reinterpret_cast<const void*>(f.Matmul),
        reinterpret_cast<const void*>(f.MatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(f.MatmulDescCreate),
        reinterpret_cast<const void*>(f.MatmulDescDestroy),
        reinterpret_cast<const void*>(f.MatmulDescSetAttribute),
        reinterpret_cast<const void*>(f.MatmulPreferenceCreate),
        reinterpret_cast<const void*>(f.MatmulPreferenceDestroy),
        reinterpret_cast<const void*>(f.MatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(f.MatrixLayoutCreate),
        reinterpret_cast<const void*>(f.MatrixLayoutDestroy),
        reinterpret_cast<const void*>(f.MatrixLayoutSetAttribute)}) {
    EXPECT_NE(p, nullptr);
  }
  // The library is in the process now, and a second load is the first one's.
  void* h = dlopen(CublasLtSoname().c_str(), RTLD_NOLOAD | RTLD_LAZY);
  EXPECT_NE(h, nullptr);
  if (h != nullptr) dlclose(h);
  auto again = LoadCublasLt();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lt);
  // A layout made and destroyed through the entry points: the library works without a GPU.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(f.MatrixLayoutCreate(&layout, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(f.MatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
}

TEST(CublasLtLibraryTest, AMissingLibraryIsRefusedByName) {
  auto lt = OpenCublasLt("/nonexistent/libcublasLt.so.99");
  ASSERT_FALSE(lt.ok());
  EXPECT_EQ(lt.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(lt.status(), {"/nonexistent/libcublasLt.so.99", "GPU matrix products"}));
}

TEST(CublasLtLibraryTest, ALibraryWithoutTheEntryPointsIsRefusedNamingTheFirstMissing) {
  auto lt = OpenCublasLt("libz.so.1");  // present wherever dflow builds (zlib)
  ASSERT_FALSE(lt.ok());
  EXPECT_EQ(lt.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(lt.status(), {"libz.so.1", "cublasLtCreate"}));
}

}  // namespace
}  // namespace dflow::cuda
