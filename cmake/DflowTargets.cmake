# Helpers that give every dflow target the same flags.

set(DFLOW_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC warns of a class whose member's type is in an anonymous namespace unless both are in the
# main file; a unity build includes every source into another, so the warning no longer tells a
# header (where it matters) from a source file (where it does not).
if(DFLOW_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND DFLOW_WARNINGS -Wno-subobject-linkage)
endif()
# Clang checks the lock annotations (graph/thread_annotations.h): touching guarded state without
# its mutex fails the build.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND DFLOW_WARNINGS -Wthread-safety -Werror=thread-safety)
endif()
if(DFLOW_SANITIZE)
  set(DFLOW_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
                            -fno-sanitize-recover=undefined)
  # C++ only: nvcc takes none of these (the CUDA kernels build without sanitizers).
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${DFLOW_SANITIZER_FLAGS}>")
  add_link_options(${DFLOW_SANITIZER_FLAGS})
  # Programs linked at a fixed address: the sanitizers' metadata (a source location for every
  # check, a descriptor for every global) are millions of pointers, which a position-independent
  # program relocates at every start (3.9M relocations, 0.4 s of the 0.85 s a test binary took
  # to start and exit; ctest starts one per test case).
  add_link_options("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>")
endif()
if(DFLOW_TSAN)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=thread)
endif()
# Fuzzing: every target gets libFuzzer's coverage instrumentation and ASan + UBSan; the fuzz
# targets link libFuzzer itself (tests/fuzz/CMakeLists.txt).
if(DFLOW_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DFLOW_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++), not "
                        "${CMAKE_CXX_COMPILER_ID}")
  endif()
  set(DFLOW_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
                       -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${DFLOW_FUZZ_FLAGS};-fsanitize=fuzzer-no-link>")
  add_link_options(${DFLOW_FUZZ_FLAGS})
endif()

# dflow_library(NAME SOURCES ... DEPS ...): the library dflow_NAME, alias dflow::NAME, installed
# and exported as dflow::NAME (cmake/DflowInstall.cmake) unless NO_INSTALL (what only the tools,
# tests and examples of this tree use).
function(dflow_library name)
  cmake_parse_arguments(ARG "NO_INSTALL" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(dflow_${name} ${ARG_SOURCES})
  add_library(dflow::${name} ALIAS dflow_${name})
  set_target_properties(dflow_${name} PROPERTIES EXPORT_NAME ${name})
  # Sources include "module/file.h" from the tree's root; an installed program finds the same
  # names under <prefix>/include/dflow, and dflow/version.h, dflow/dflow.h under <prefix>/include.
  target_include_directories(dflow_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                                                  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                  $<INSTALL_INTERFACE:include/dflow>
                                                  $<INSTALL_INTERFACE:include>)
  target_compile_features(dflow_${name} PUBLIC cxx_std_20)
  if(NOT ARG_NO_INSTALL)
    set_property(GLOBAL APPEND PROPERTY DFLOW_INSTALLED_LIBRARIES dflow_${name})
  endif()
  target_compile_options(dflow_${name} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${DFLOW_WARNINGS}>")
  target_link_libraries(dflow_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# The tests' own code (not the libraries they test) compiles at -O1 in the optimised builds: it
# is calls into dflow and plain reference loops, and at -O3 took a quarter longer to compile for
# no test that needs it.
set(DFLOW_TEST_OPTIMIZATION "$<$<CONFIG:Release,RelWithDebInfo>:-O1>")

# dflow_test(NAME SOURCES ... DEPS ...): a GoogleTest binary registered with ctest, a ctest test
# per GoogleTest test. SERIAL: its tests run with no other test beside them (ctest RUN_SERIAL).
# SHARDED: the binary runs as two ctest tests (GoogleTest's shards) instead: the conformance
# binaries' ~1380 cases take 0.6-1.2 s in one process (7-10 s under ASan), and 295 s as a
# process per case (each start then cost about 0.1 s, half a second under ASan).
# dflow_test_objects(NAME SOURCES ... DEPS ...): test sources that several test binaries share,
# compiled once with the tests' flags; a dflow_test lists NAME among its DEPS to take them.
function(dflow_test_objects name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${DFLOW_WARNINGS} ${DFLOW_TEST_OPTIMIZATION})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} GTest::gtest)
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/tests)
endfunction()

function(dflow_test name)
  cmake_parse_arguments(ARG "SERIAL;SHARDED" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${DFLOW_WARNINGS} ${DFLOW_TEST_OPTIMIZATION})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(ARG_SHARDED)
    foreach(shard 0 1)
      add_test(NAME ${name}_shard${shard} COMMAND ${name} --gtest_brief=1)
      set_tests_properties(${name}_shard${shard} PROPERTIES TIMEOUT 900 ENVIRONMENT
                           "GTEST_TOTAL_SHARDS=2;GTEST_SHARD_INDEX=${shard}")
    endforeach()
  elseif(ARG_SERIAL)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
  endif()
endfunction()

# Backends: a device type's kernels and devices, a transport. A backend's folder adds itself to
# its KIND's list with dflow_add_backend(KIND HEADER h REGISTER "call" TARGET t); the folder
# that owns the KIND then generates the C++ that registers them all with
# dflow_backend_sources(KIND TEMPLATE OUT), which also sets DFLOW_<KIND>_TARGETS to link. So a
# backend is one folder and one add_subdirectory line, with no #if in generic code.
function(dflow_add_backend kind)
  cmake_parse_arguments(ARG "" "HEADER;REGISTER;TARGET" "" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY DFLOW_${kind}_HEADERS ${ARG_HEADER})
  set_property(GLOBAL APPEND PROPERTY DFLOW_${kind}_CALLS "${ARG_REGISTER}")
  set_property(GLOBAL APPEND PROPERTY DFLOW_${kind}_TARGETS ${ARG_TARGET})
endfunction()

function(dflow_backend_sources kind template out)
  get_property(headers GLOBAL PROPERTY DFLOW_${kind}_HEADERS)
  get_property(calls GLOBAL PROPERTY DFLOW_${kind}_CALLS)
  get_property(targets GLOBAL PROPERTY DFLOW_${kind}_TARGETS)
  set(DFLOW_BACKEND_INCLUDES "")
  foreach(h ${headers})
    string(APPEND DFLOW_BACKEND_INCLUDES "#include \"${h}\"\n")
  endforeach()
  set(DFLOW_BACKEND_CALLS "")
  foreach(c ${calls})
    string(APPEND DFLOW_BACKEND_CALLS "    if (s.ok()) ${c};\n")
  endforeach()
  configure_file(${template} ${out} @ONLY)
  set(DFLOW_${kind}_TARGETS ${targets} PARENT_SCOPE)
endfunction()
