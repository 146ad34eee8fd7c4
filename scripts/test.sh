#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test with ctest; then does the
# same under AddressSanitizer + UndefinedBehaviorSanitizer (skip with DFLOW_SKIP_SANITIZE=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
# As root (CI), the Slurm and Open MPI launch tests must run, not skip: setup.sh installed them.
if [ "$(id -u)" -eq 0 ]; then export DFLOW_REQUIRE_LAUNCHERS=1; fi

# Line tables only and lld: the suite builds about a third faster than with full debug info;
# each target's sources compiled in batches (unity build) take about half the time again.
fast_build=(-DDFLOW_DEBUG_INFO=lines -DDFLOW_USE_LLD=ON -DDFLOW_UNITY_BUILD=ON)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDFLOW_BUILD_BENCH=ON "${fast_build[@]}"
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")

if [ "${DFLOW_SKIP_SANITIZE:-0}" != "1" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDFLOW_SANITIZE=ON \
    -DDFLOW_BUILD_BENCH=OFF "${fast_build[@]}"
  cmake --build build-asan -j "$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs")
fi

# The seeds of the fuzz targets and every input that once broke them keep the loaders' contract
# in both suites above (FuzzRegressionsTest); DFLOW_FUZZ_CHECK=1 also builds the libFuzzer
# targets (clang) and runs them through those (scripts/fuzz.sh fuzzes for real).
if [ "${DFLOW_FUZZ_CHECK:-0}" = "1" ]; then
  scripts/fuzz.sh --check
fi

# The rendezvous conformance suite over UCX and the transport tests under ThreadSanitizer, and
# the lock annotations checked by clang over the runtime, transports and distributed runtime
# (skip with DFLOW_SKIP_TSAN=1).
if [ "${DFLOW_SKIP_TSAN:-0}" != "1" ]; then
  scripts/tsan.sh
fi
