# `cmake --install`: the libraries (exported as the CMake package dflow: dflow::dflow and one
# target per part), the headers under <prefix>/include/dflow, dflow/version.h and dflow/dflow.h
# under <prefix>/include, a pkg-config file (dflow.pc), the file schemas and the tools.
# Included last by the top-level CMakeLists.txt, when every library has been declared.
include(CMakePackageConfigHelpers)

set(DFLOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dflow)
get_property(DFLOW_INSTALLED_LIBRARIES GLOBAL PROPERTY DFLOW_INSTALLED_LIBRARIES)

install(TARGETS ${DFLOW_INSTALLED_LIBRARIES} dflow
        EXPORT dflowTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT dflowTargets NAMESPACE dflow:: DESTINATION ${DFLOW_CMAKE_DIR})

# Every header of the installed parts (a public header includes the others it needs), those of
# backends this build lacks left out.
set(header_excludes)
if(NOT DFLOW_CUDA_ENABLED)
  list(APPEND header_excludes PATTERN "cuda" EXCLUDE)
endif()
if(NOT DFLOW_UCX_ENABLED)
  list(APPEND header_excludes PATTERN "ucx" EXCLUDE)
endif()
set(header_dirs graph framework ops rewrite placer partition serialization runtime transport
                distributed)
if(DFLOW_ONNX_ENABLED)
  list(APPEND header_dirs onnx)
endif()
foreach(dir ${header_dirs})
  install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dflow
          FILES_MATCHING PATTERN "*.h" ${header_excludes})
endforeach()
install(FILES include/dflow/dflow.h ${PROJECT_BINARY_DIR}/include/dflow/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dflow)
install(DIRECTORY serialization/schema/ DESTINATION ${CMAKE_INSTALL_DATADIR}/dflow/schema
        FILES_MATCHING PATTERN "*.fbs")

# The package: its dependencies found for the user, components named after the parts
# (find_package(dflow REQUIRED COMPONENTS distributed)).
set(DFLOW_COMPONENTS)
foreach(lib ${DFLOW_INSTALLED_LIBRARIES})
  string(REGEX REPLACE "^dflow_" "" part ${lib})
  list(APPEND DFLOW_COMPONENTS ${part})
endforeach()
configure_package_config_file(cmake/dflowConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/dflowConfig.cmake
                              INSTALL_DESTINATION ${DFLOW_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dflowConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dflowConfig.cmake ${PROJECT_BINARY_DIR}/dflowConfigVersion.cmake
        DESTINATION ${DFLOW_CMAKE_DIR})

# pkg-config: static libraries, so Libs lists them all, dependents first (each library is
# declared after those it links), then what they link.
set(DFLOW_PC_LIBS)
set(reversed ${DFLOW_INSTALLED_LIBRARIES})
list(REVERSE reversed)
foreach(lib ${reversed})
  string(APPEND DFLOW_PC_LIBS " -l${lib}")
endforeach()
set(DFLOW_PC_REQUIRES "fmt flatbuffers nlohmann_json zlib")
# libomp first, so that it, not the libgomp that -fopenmp adds, runs the OpenMP regions.
set(DFLOW_PC_DEPS "-ldnnl -fopenmp -pthread")
if(DFLOW_LIBOMP_LIBRARY)
  set(DFLOW_PC_DEPS "${DFLOW_LIBOMP_LIBRARY} ${DFLOW_PC_DEPS}")
endif()
if(DFLOW_UCX_ENABLED)
  string(APPEND DFLOW_PC_REQUIRES " ucx")
endif()
if(DFLOW_ONNX_ENABLED)
  string(APPEND DFLOW_PC_DEPS " -lonnx -lonnx_proto")
  string(APPEND DFLOW_PC_REQUIRES " protobuf")
endif()
if(DFLOW_CUDA_ENABLED)
  string(APPEND DFLOW_PC_DEPS " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR}"
         " -lcudart ${CUDNN_LIBRARY}")
endif()
configure_file(cmake/dflow.pc.in ${PROJECT_BINARY_DIR}/dflow.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dflow.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
