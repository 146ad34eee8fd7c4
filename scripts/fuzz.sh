#!/usr/bin/env bash
# Fuzzes the file loaders (graph files in both forms, checkpoints, .npy arrays) with libFuzzer,
# for a bounded time per target.
#
#   scripts/fuzz.sh [SECONDS]      # per target; default 60
#   FUZZ_TARGETS="npy" scripts/fuzz.sh 30
#
# Builds tests/fuzz with clang, ASan and UBSan in build-fuzz/, writes the seed corpus, then runs
# each target on its corpus (build-fuzz/corpus/, kept between runs so coverage accumulates).
# A crash, a leak, a single allocation over 1 GiB, an input taking over 10 s, or a broken
# contract (a refusal that is not an InvalidArgument naming the file, an accepted file that does
# not round-trip) stops the target, leaves the input in build-fuzz/crashes/ and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
targets=${FUZZ_TARGETS:-"graph_file checkpoint_file npy"}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: SECONDS must be a positive integer, not '$seconds'" >&2
  exit 2
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; scripts/setup.sh installs it" >&2
  exit 1
fi

out=build-fuzz
cmake -S . -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DDFLOW_FUZZ=ON -DDFLOW_WITH_CUDA=OFF -DDFLOW_WITH_UCX=OFF \
  -DDFLOW_BUILD_TESTS=OFF -DDFLOW_BUILD_BENCH=OFF -DDFLOW_BUILD_EXAMPLES=OFF >"$out.configure.log" \
  || { cat "$out.configure.log" >&2; exit 1; }
cmake --build "$out" -j "$(nproc)" --target fuzzers

rm -rf "$out/seeds"
"$out/bin/fuzz_seeds" "$out/seeds"
mkdir -p "$out/crashes"
declare -A seeds=([graph_file]=graph [checkpoint_file]=checkpoint [npy]=npy)

status=0
for t in $targets; do
  if [ -z "${seeds[$t]:-}" ]; then
    echo "fuzz: unknown target '$t' (graph_file, checkpoint_file, npy)" >&2
    exit 2
  fi
  corpus="$out/corpus/$t"
  mkdir -p "$corpus"
  log="$out/$t.log"
  echo "fuzz $t: ${seconds}s (log: $log)"
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$out/bin/${t}_fuzzer" "$corpus" "$out/seeds/${seeds[$t]}" -max_total_time="$seconds" \
    -timeout=10 -malloc_limit_mb=1024 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/crashes/$t-" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz $t: ok, ${runs:-?} inputs, corpus $(ls "$corpus" | wc -l) files"
  else
    status=1
    echo "fuzz $t: FAILED; the input is in $out/crashes/:" >&2
    grep -E "ERROR|contract broken|Test unit written" "$log" | head -5 >&2 || tail -20 "$log" >&2
  fi
done
exit $status
