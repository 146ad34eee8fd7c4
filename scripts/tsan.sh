#!/usr/bin/env bash
# Builds the transport tests with clang and ThreadSanitizer in build-tsan/ and runs them: the
# transport and rendezvous conformance suites over every transport built (in-process, UCX), the
# UCX transport's own tests and the wire decoders. Only transport_tests runs (graph/, framework/
# and transport/): GCC's OpenMP runtime is not instrumented and floods TSan with false reports
# from oneDNN's threads, and the transport does not use it. A data race fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null; then
  echo "tsan: clang++ not found; scripts/setup.sh installs it" >&2
  exit 1
fi
out=build-tsan
cmake -S . -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDFLOW_USE_LLD=ON -DDFLOW_TSAN=ON -DDFLOW_WITH_CUDA=OFF \
  -DDFLOW_BUILD_BENCH=OFF -DDFLOW_BUILD_EXAMPLES=OFF -DCMAKE_OPTIMIZE_DEPENDENCIES=ON \
  >"$out.configure.log" || { cat "$out.configure.log" >&2; exit 1; }
# This clang build also checks every lock annotation (-Wthread-safety,
# graph/thread_annotations.h; a violation fails the build) where locks are taken: besides the
# transports, it compiles the runtime, the training loop and the distributed runtime, their own
# objects only (CMAKE_OPTIMIZE_DEPENDENCIES: a static library does not wait for the libraries it
# links), which nothing here runs.
analysed="dflow_runtime dflow_train dflow_transport_api dflow_transport_inproc dflow_distributed"
if cmake --build "$out" --target help 2>/dev/null | grep -q "^dflow_transport_ucx:"; then
  analysed+=" dflow_transport_ucx"
fi
cmake --build "$out" -j "$(nproc)" --target transport_tests $analysed >"$out.build.log" \
  || { tail -40 "$out.build.log" >&2; exit 1; }
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$out/bin/transport_tests" \
  --gtest_brief=1 >"$out.log" 2>&1 || { tail -60 "$out.log" >&2; exit 1; }
echo "tsan: transport_tests under ThreadSanitizer: $(grep -E '^\[  PASSED  \]' "$out.log")"
