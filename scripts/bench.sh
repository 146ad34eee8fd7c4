#!/usr/bin/env bash
# Builds the benchmarks in Release mode, runs each several times and prints one summary line per
# benchmark (medians):  bench <name>: <metric>=<value><unit> [<peer>=<value><unit> ratio=<x>]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
build=${DFLOW_BENCH_BUILD:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLOW_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target executor_bench >/dev/null
reps=${DFLOW_BENCH_REPETITIONS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$build/bin/executor_bench" --benchmark_repetitions="$reps" --benchmark_format=json \
  --benchmark_out="$out/executor.json" --benchmark_out_format=json >/dev/null
python3 - "$out/executor.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
names = {"BM_ExecutorChain": "executor_chain_100k", "BM_ExecutorFanOutFanIn": "executor_fanout_100k",
         "BM_ExecutorAddChain": "executor_add_chain_100k"}
for run in runs:
    if run.get("aggregate_name") != "median":
        continue
    base = run["run_name"].split("/")[0]
    print(f"bench {names.get(base, base)}: overhead={run['ns_per_node']:.1f}ns/node "
          f"target=300ns/node ratio={run['ns_per_node'] / 300:.2f}")
PY
