#!/usr/bin/env bash
# Fuzzes the file loaders (graph files in both forms, checkpoints, .npy arrays) and the decoders
# of the messages between processes (transport/ucx/wire.h) and of the requests' payloads
# (distributed/messages.h) with libFuzzer,
# for a bounded time per target.
#
#   scripts/fuzz.sh [SECONDS]      # per target; default 60
#   FUZZ_TARGETS="npy" scripts/fuzz.sh 30
#   scripts/fuzz.sh --check        # no fuzzing: build, then run the seeds and the kept
#                                  # regressions once through the libFuzzer targets
#                                  # (scripts/test.sh's suites run both through the
#                                  # loaders: FuzzRegressionsTest)
#
# Builds tests/fuzz with clang, ASan and UBSan in build-fuzz/, writes the seed corpus, then runs
# each target on its corpus (build-fuzz/corpus/, kept between runs so coverage accumulates).
# A crash, a leak, a single allocation over 1 GiB, an input taking over 10 s, or a broken
# contract (a refusal that is not an InvalidArgument naming the file, an accepted file that does
# not round-trip) stops the target, leaves the input in build-fuzz/crashes/ and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
check=0
if [ "$seconds" = "--check" ]; then check=1; seconds=0; fi
targets=${FUZZ_TARGETS:-"graph_file checkpoint_file npy wire onnx"}
if [ $check = 0 ] && ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: SECONDS must be a positive integer or --check, not '$seconds'" >&2
  exit 2
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; scripts/setup.sh installs it" >&2
  exit 1
fi

out=build-fuzz
cmake -S . -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDFLOW_USE_LLD=ON -DDFLOW_FUZZ=ON -DDFLOW_WITH_CUDA=OFF -DDFLOW_WITH_UCX=AUTO \
  -DDFLOW_BUILD_TESTS=OFF -DDFLOW_BUILD_BENCH=OFF -DDFLOW_BUILD_EXAMPLES=OFF \
  -DCMAKE_OPTIMIZE_DEPENDENCIES=ON >"$out.configure.log" || { cat "$out.configure.log" >&2; exit 1; }
cmake --build "$out" -j "$(nproc)" --target fuzzers >"$out.build.log" \
  || { tail -40 "$out.build.log" >&2; exit 1; }

rm -rf "$out/seeds"
"$out/bin/fuzz_seeds" "$out/seeds"
mkdir -p "$out/crashes"

status=0
for t in $targets; do
  # ONNX import is built where libonnx-dev is found (scripts/setup.sh installs it).
  if [ "$t" = onnx ] && [ ! -x "$out/bin/onnx_fuzzer" ]; then
    echo "fuzz onnx: skipped, this build has no ONNX import"
    continue
  fi
  # fuzz_seeds writes a folder of seeds per target (tests/fuzz/seed_corpus.h).
  if [ ! -d "$out/seeds/$t" ]; then
    echo "fuzz: unknown target '$t' (graph_file, checkpoint_file, npy, wire, onnx)" >&2
    exit 2
  fi
  corpus="$out/corpus/$t"
  mkdir -p "$corpus"
  log="$out/$t.log"
  # Inputs that once broke this target (tests/serialization/fuzz_regressions/<target>-*).
  kept=(tests/serialization/fuzz_regressions/"$t"-*)
  [ -e "${kept[0]}" ] || kept=()
  if [ $check = 1 ]; then
    if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$out/bin/${t}_fuzzer" -malloc_limit_mb=1024 "$out/seeds/$t"/* "${kept[@]}" \
      >"$log" 2>&1; then
      echo "fuzz $t: checked $(ls "$out/seeds/$t" | wc -l) seeds and ${#kept[@]} kept inputs"
    else
      status=1
      echo "fuzz $t: FAILED on a seed or kept input (log: $log)" >&2
      grep -E "ERROR|contract broken|runtime error" "$log" | head -5 >&2 || tail -20 "$log" >&2
    fi
    continue
  fi
  for f in "${kept[@]}"; do cp -n "$f" "$corpus/"; done
  echo "fuzz $t: ${seconds}s (log: $log)"
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$out/bin/${t}_fuzzer" "$corpus" "$out/seeds/$t" -max_total_time="$seconds" \
    -timeout=10 -malloc_limit_mb=1024 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/crashes/$t-" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz $t: ok, ${runs:-?} inputs, corpus $(ls "$corpus" | wc -l) files"
  else
    status=1
    echo "fuzz $t: FAILED; the input is in $out/crashes/:" >&2
    grep -E "ERROR|contract broken|runtime error|Test unit written" "$log" | head -5 >&2 \
      || tail -20 "$log" >&2
    echo "fuzz $t: after the fix, keep the input as tests/serialization/fuzz_regressions/$t-..." >&2
  fi
done
exit $status
