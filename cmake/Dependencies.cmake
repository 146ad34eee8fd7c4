# Finds dflow's dependencies. Required ones fail configure with the package to install;
# CUDA and UCX follow DFLOW_WITH_CUDA / DFLOW_WITH_UCX (AUTO: use when found).

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
# The OpenMP runtime under oneDNN and dflow's own loops. GCC's libgomp ends each parallel region
# with a futex wake-up, a system call whether or not a thread sleeps (two a region, 1-2 us each in
# a VM); LLVM's libomp, which implements libgomp's ABI as well (GOMP_parallel and the rest, with
# their symbol versions), releases its spinning threads with a store. MobileNetV2 at batch 1, 53
# convolutions of 20-300 us a step, steps 6.5% faster on it. AUTO: libomp where it is installed
# (Debian's libomp-dev); it then takes the place of libgomp for oneDNN too, as the programs' own
# dependency found before oneDNN's.
set(DFLOW_OPENMP_RUNTIME AUTO CACHE STRING "OpenMP runtime: AUTO (LLVM's libomp where found), LLVM or GNU")
set_property(CACHE DFLOW_OPENMP_RUNTIME PROPERTY STRINGS AUTO LLVM GNU)
string(TOUPPER "${DFLOW_OPENMP_RUNTIME}" DFLOW_OPENMP_RUNTIME_VALUE)
if(NOT DFLOW_OPENMP_RUNTIME_VALUE MATCHES "^(AUTO|LLVM|GNU)$")
  message(FATAL_ERROR "DFLOW_OPENMP_RUNTIME must be AUTO, LLVM or GNU, not '${DFLOW_OPENMP_RUNTIME}'")
endif()
set(DFLOW_LIBOMP_LIBRARY "")
if(NOT DFLOW_OPENMP_RUNTIME_VALUE STREQUAL "GNU")
  find_library(DFLOW_LIBOMP NAMES omp libomp.so.5
               PATHS /usr/lib/llvm-16/lib /usr/lib/llvm-15/lib /usr/lib/llvm-14/lib)
  if(DFLOW_LIBOMP)
    set(DFLOW_LIBOMP_LIBRARY "${DFLOW_LIBOMP}")
    set_property(TARGET OpenMP::OpenMP_CXX PROPERTY INTERFACE_LINK_LIBRARIES
                 "${DFLOW_LIBOMP};Threads::Threads")
  elseif(DFLOW_OPENMP_RUNTIME_VALUE STREQUAL "LLVM")
    message(FATAL_ERROR "DFLOW_OPENMP_RUNTIME=LLVM but libomp was not found (install libomp-dev)")
  endif()
endif()
find_package(fmt REQUIRED)
find_package(dnnl REQUIRED)
find_package(FlatBuffers REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
if(DFLOW_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(DFLOW_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# Resolves an AUTO|ON|OFF option against whether the package was found.
function(dflow_resolve_option option found out_var)
  string(TOUPPER "${${option}}" value)
  if(value STREQUAL "OFF")
    set(${out_var} OFF PARENT_SCOPE)
  elseif(value STREQUAL "ON" AND NOT found)
    message(FATAL_ERROR "${option}=ON but the package was not found")
  elseif(value STREQUAL "ON" OR value STREQUAL "AUTO")
    set(${out_var} ${found} PARENT_SCOPE)
  else()
    message(FATAL_ERROR "${option} must be AUTO, ON or OFF, not '${${option}}'")
  endif()
endfunction()

set(DFLOW_CUDA_FOUND OFF)
set(DFLOW_CUDNN_FOUND OFF)
if(NOT DFLOW_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    # The GPU kernels need cuDNN (convolution, pooling, batch norm) as well as the toolkit.
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
      set(DFLOW_CUDNN_FOUND ON)
      set(DFLOW_CUDA_FOUND ON)
    endif()
  endif()
endif()
dflow_resolve_option(DFLOW_WITH_CUDA ${DFLOW_CUDA_FOUND} DFLOW_CUDA_ENABLED)
# The GPU kernels (ops/cuda/*.cu) build with the toolkit's nvcc, for Hopper (H100, H200) by
# default: machine code for sm_90 and PTX that newer GPUs compile at load.
set(DFLOW_CUDA_ARCHITECTURES "90" CACHE STRING "GPU architectures of the CUDA kernels")
if(DFLOW_CUDA_ENABLED)
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${DFLOW_CUDA_ARCHITECTURES})
  # No runtime added by the CUDA language: the targets link CUDA::cudart (shared) themselves,
  # where CMake would add cudart_static and cudadevrt without their folder to C++ links.
  set(CMAKE_CUDA_RUNTIME_LIBRARY None)
  enable_language(CUDA)
  # CMake 3.25 does not know that CUDA 12 and later's nvcc takes C++20; the targets' cxx_std_20
  # asks it of the .cu files too.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA_STANDARD 20)
  # Packages that name /usr/include as theirs (fmt) must not put it first for nvcc: its C++
  # headers then miss the C headers they include_next.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
endif()

set(DFLOW_UCX_FOUND OFF)
if(NOT DFLOW_WITH_UCX STREQUAL "OFF")
  find_package(ucx QUIET)
  if(ucx_FOUND)
    set(DFLOW_UCX_FOUND ON)
  endif()
endif()
dflow_resolve_option(DFLOW_WITH_UCX ${DFLOW_UCX_FOUND} DFLOW_UCX_ENABLED)

# ONNX import: Debian's libonnx-dev (ONNX 1.12, its CMake package) over protobuf 3.21.
set(DFLOW_ONNX_FOUND OFF)
if(NOT DFLOW_WITH_ONNX STREQUAL "OFF")
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND)
    find_package(ONNX QUIET CONFIG)
    if(ONNX_FOUND AND TARGET onnx AND TARGET onnx_proto)
      set(DFLOW_ONNX_FOUND ON)
    endif()
  endif()
endif()
dflow_resolve_option(DFLOW_WITH_ONNX ${DFLOW_ONNX_FOUND} DFLOW_ONNX_ENABLED)
