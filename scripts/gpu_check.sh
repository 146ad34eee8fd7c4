#!/usr/bin/env bash
# The GPU check: everything of dflow's CUDA backend that needs a GPU, run from the bundle of
# scripts/gpu_bundle.sh on a machine that builds nothing, in order of value, each part under its
# own timeout and within one overall budget. Every part writes its output as it goes to a file
# under OUT and prints one summary line when it ends:
#   gpu_check <part>: PASS|FAIL|TIMEOUT|SKIPPED (<seconds>s) <detail>
# and the script exits non-zero when any part did not pass. Without a GPU it fails at once
# (part env), never passes.
#
#   scripts/gpu_check.sh [--bundle DIR] [--out DIR] [--budget SECONDS] [--parts a,b,...]
#
# Parts (default all, in this order):
#   env          nvidia-smi, the driver, where cuBLAS and cuDNN are found, every `ldd` not found
#   cuda         cuda_tests: the device, copies, calibration, CUDA IPC between processes, f16/bf16
#   runtime      runtime_tests: sessions, memory plans and placement with the GPU present
#   conformance  op_conformance_tests, the GPU's forward cases, then its gradient cases (two
#                processes: a crash in one leaves the other's results)
#   ipc          distributed_tests: GPU tensors between worker processes by CUDA IPC over UCX
#   examples     resnet50, fashion_mnist_mlp and fashion_mnist_cnn trained on gpu:0 (the CNN also
#                with --mixed-precision bf16 and f16, each to 87%; the data from DFLOW_GPU_DATA,
#                default the bundle's fashion-mnist folder)
#   bench        scripts/gpu_bench.sh: against cuBLAS, cuDNN, PyTorch eager; CUDA IPC bandwidth
#
# DFLOW_REQUIRE_GPU=1 is set for every part: a GPU test that finds no GPU fails instead of skipping.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=""
out=${OUT:-$(mktemp -d)}
budget=480
parts="env,cuda,runtime,conformance,ipc,examples,bench"
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "gpu_check: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$bundle" ]; then
  tarball="$here/.gpu/dflow-gpu.tar.xz"
  if [ ! -f "$tarball" ]; then
    echo "gpu_check: no bundle: $tarball is missing (make it with scripts/gpu_bundle.sh)" >&2
    exit 2
  fi
  tmp=$(mktemp -d)
  tar -xJf "$tarball" -C "$tmp" || { echo "gpu_check: cannot unpack $tarball" >&2; exit 2; }
  bundle=$tmp/dflow-gpu
fi
mkdir -p "$out"
export DFLOW_REQUIRE_GPU=1
start=$(date +%s)
failed=0
summary="$out/summary.txt"
: >"$summary"

remaining() { echo $((budget - ($(date +%s) - start))); }

# part NAME LIMIT LOG COMMAND...: runs COMMAND under min(LIMIT, what is left of the budget),
# appending to OUT/LOG, and prints the part's summary line.
part() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    echo "gpu_check $name: SKIPPED (0s) the budget of ${budget}s is spent" | tee -a "$summary"
    failed=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name: $* (limit ${limit}s)" >>"$out/$log"
  local first
  first=$(wc -l <"$out/$log")
  local t0 rc detail
  t0=$(date +%s)
  # In a child bash, so that the functions below (exported) can be parts too.
  timeout --kill-after=10 "$limit" bash -c '"$@"' part "$@" >>"$out/$log" 2>&1
  rc=$?
  local took=$(($(date +%s) - t0))
  detail=$(tail -n +"$first" "$out/$log" | grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|tests? ran|^bench ' |
    tail -n 3 | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    echo "gpu_check $name: PASS (${took}s) $detail" | tee -a "$summary"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "gpu_check $name: TIMEOUT (${took}s of ${limit}s) $detail" | tee -a "$summary"
    failed=1
  else
    echo "gpu_check $name: FAIL (rc $rc, ${took}s) $detail" | tee -a "$summary"
    failed=1
  fi
}

wants() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
run() { "$bundle/run.sh" "$@"; }
gtest_args=(--gtest_color=no --gtest_brief=1)

env_check() {
  echo "host: $(uname -a)"
  nvidia-smi || { echo "nvidia-smi failed: no usable GPU driver"; return 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
  "$bundle/run.sh" --print-library-path
  echo "ldd of the bundled binaries (not found):"
  local missing
  missing=$("$bundle/run.sh" --ldd | grep "not found" | sort -u)
  if [ -n "$missing" ]; then
    echo "$missing"
    return 1
  fi
  echo "(none)"
}

export bundle
export -f run env_check
if wants env; then part env 30 env.log env_check; fi
if wants cuda; then part cuda 90 cuda.log run cuda_tests "${gtest_args[@]}"; fi
if wants runtime; then part runtime 90 runtime.log run runtime_tests "${gtest_args[@]}" \
    --gtest_filter='SessionCreateTest.*:*Calibration*:*MultiDevice*:*DeviceMemory*:*MemoryPlan*'; fi
if wants conformance; then
  part conformance_forward 120 conformance.log run op_conformance_tests "${gtest_args[@]}" \
    --gtest_filter='AllOps/OpConformanceTest.*/GPU_*:DeviceTypesUnderTest.*:*BadInput*:OpConformanceCoverageTest.*'
  part conformance_gradient 150 conformance.log run op_conformance_tests "${gtest_args[@]}" \
    --gtest_filter='AllOps/OpGradientConformanceTest.*/GPU_*:DeviceTypesUnderTest.*'
  part device_conformance 90 conformance.log run op_conformance_tests "${gtest_args[@]}" \
    --gtest_filter='Types/DeviceConformance.*/GPU:DeviceTypesUnderTest.*'
fi
if wants ipc; then
  part ipc 90 ipc.log run distributed_tests "${gtest_args[@]}" --gtest_filter='*CudaIpc*'
fi
if wants examples; then
  data=${DFLOW_GPU_DATA:-$here/.gpu/fashion-mnist}
  part resnet50 90 examples.log run resnet50 --devices gpu:0 --batch-size 128 --steps 10 --check-learns
  if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    part mlp 90 examples.log run fashion_mnist_mlp --devices gpu:0 --data "$data" --epochs 2
    # f32, then mixed precision (bf16; f16 with dynamic loss scaling) to the same accuracy.
    for mp in none bf16 f16; do
      part "cnn_$mp" 120 examples.log run fashion_mnist_cnn --devices gpu:0 --data "$data" \
        --epochs 1 --min-accuracy 0.87 --mixed-precision "$mp"
    done
  else
    echo "gpu_check examples: SKIPPED (0s) no Fashion-MNIST files in $data" | tee -a "$summary"
    failed=1
  fi
fi
if wants bench; then
  # The benchmarks' JSON (models_bench's peak_bytes and arena_bytes counters among them) go to
  # the end of bench.log: OUT keeps to 8 files.
  bench_json=$(mktemp -d)
  part bench 300 bench.log env DFLOW_GPU_OUT="$bench_json" "$here/scripts/gpu_bench.sh" "$bundle"
  for j in "$bench_json"/*.json; do
    [ -f "$j" ] && { echo "=== $(basename "$j")"; cat "$j"; } >>"$out/bench.log"
  done
  grep -h '^bench ' "$out/bench.log" 2>/dev/null | tee -a "$summary"
fi

echo "gpu_check: $(grep -c ': PASS' "$summary") of $(grep -c '^gpu_check ' "$summary") parts passed" \
  "in $(($(date +%s) - start))s; logs in $out" | tee -a "$summary"
exit $failed
