#!/usr/bin/env bash
# The GPU benchmarks, run on a machine with a GPU from the bundle of scripts/gpu_bundle.sh (see
# the README's "To run on a GPU"), each against its peer in the same run, one summary line each:
#   bench gpu_matmul_4096: step=...ms cublas=...ms ratio=...        (target <= 1.10)
#   bench gpu_conv2d_3x3: step=...ms cudnn=...ms ratio=...          (target <= 1.10)
#   bench gpu_{mlp,cnn}_train_step_b128: step=...ms pytorch=...ms ratio=...
#   bench gpu_cnn_train_step_bf16_b128: step=...ms pytorch=...ms ratio=...   (bf16 autocast)
#   bench gpu_resnet50_train_step_b128: step=...ms pytorch=...ms ratio=... compile=...ms
#   bench gpu_resnet50_train_step_bf16_b128: step=...ms pytorch=...ms ratio=...  (target <= 1.0)
#   bench cuda_ipc_64mib: transfer=...ms bandwidth=...GB/s d2d_copy=...ms ratio=...
# PyTorch is the GPU machine's python3 (bench/peers/torch_resnet.py, torch_gpu_models.py), in
# f32 without TF32 on both sides (DFLOW_ALLOW_TF32 unset; torch's allow_tf32 off).
#
#   scripts/gpu_bench.sh [BUNDLE_DIR]      # default /tmp/dflow-gpu
#
# Each part runs under its own timeout and its JSON is kept in DFLOW_GPU_OUT (default a temporary
# folder, removed at the end); a part that fails or times out is reported and the others go on:
# the summary prints whatever was measured. torch.compile gets DFLOW_GPU_COMPILE_LIMIT seconds
# (default 240), beside the eager peer.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-/tmp/dflow-gpu}
py=${DFLOW_GPU_PYTHON:-python3}
if [ -n "${DFLOW_GPU_OUT:-}" ]; then
  out=$DFLOW_GPU_OUT
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
run() { "$bundle/run.sh" "$@"; }
# step NAME LIMIT COMMAND...: COMMAND under a timeout; says how it ended.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  echo "gpu_bench $name: rc=$rc $((SECONDS - t0))s" >&2
  return $rc
}

step gpu_bench 90 "$bundle/run.sh" gpu_bench --benchmark_repetitions=5 --benchmark_format=json \
  --benchmark_out="$out/gpu.json" --benchmark_out_format=json >/dev/null || true
DFLOW_BENCH_DEVICE=gpu:0 DFLOW_BENCH_RESNET_BATCH=128 step models_bench 240 "$bundle/run.sh" \
  models_bench --benchmark_filter='TrainStep' --benchmark_repetitions=5 --benchmark_format=json \
  --benchmark_out="$out/models.json" --benchmark_out_format=json >/dev/null || true
if "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step torch_models 90 "$py" bench/peers/torch_gpu_models.py >"$out/torch_models.json" ||
    rm -f "$out/torch_models.json"
  step torch_resnet 90 "$py" bench/peers/torch_resnet.py --device cuda --no-tf32 --steps 20 \
    --warmup 5 >"$out/torch_resnet.json" || rm -f "$out/torch_resnet.json"
  step torch_resnet_bf16 90 "$py" bench/peers/torch_resnet.py --device cuda --no-tf32 --bf16 \
    --steps 20 --warmup 5 >"$out/torch_resnet_bf16.json" || rm -f "$out/torch_resnet_bf16.json"
  step torch_resnet_compile "${DFLOW_GPU_COMPILE_LIMIT:-240}" "$py" bench/peers/torch_resnet.py \
    --device cuda --no-tf32 --compile --steps 20 --warmup 5 >"$out/torch_resnet_compile.json" ||
    rm -f "$out/torch_resnet_compile.json"
else
  echo "gpu_bench: $py has no torch with CUDA: the PyTorch peers are not run" >&2
fi

"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def medians(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return {}
    runs = json.load(open(path))["benchmarks"]
    return {r["run_name"].split("/")[0]: r for r in runs if r.get("aggregate_name") == "median"}
def peer(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
g = medians("gpu.json")
for ours, lib, name, label in [("BM_GpuMatMul", "BM_CublasSgemm", "gpu_matmul_4096", "cublas"),
                               ("BM_GpuConv2D", "BM_CudnnConv2D", "gpu_conv2d_3x3", "cudnn")]:
    if ours in g and lib in g:
        a, b = g[ours]["real_time"], g[lib]["real_time"]
        print(f"bench {name}: step={a:.3f}ms {label}={b:.3f}ms ratio={a / b:.2f} target=1.10")
    else:
        print(f"bench {name}: not-run (no GPU or an error; run gpu_bench by hand)")
m = medians("models.json")
tm = peer("torch_models.json") or {}
for key, name, peer_key in [("BM_MlpTrainStep", "gpu_mlp_train_step_b128", "mlp_train_ms"),
                            ("BM_CnnTrainStep", "gpu_cnn_train_step_b128", "cnn_train_ms"),
                            ("BM_CnnTrainStepBf16", "gpu_cnn_train_step_bf16_b128",
                             "cnn_train_bf16_ms")]:
    if key not in m:
        print(f"bench {name}: not-run")
        continue
    ours = m[key]["real_time"]
    line = f"bench {name}: step={ours:.3f}ms"
    line += (f" pytorch={tm[peer_key]:.3f}ms ratio={ours / tm[peer_key]:.2f}" if peer_key in tm
             else " pytorch=not-found")
    print(line)
r = m.get("BM_ResNet50TrainStep")
if r:
    ours = r["real_time"]
    line = f"bench gpu_resnet50_train_step_b128: step={ours:.2f}ms"
    tr, tc = peer("torch_resnet.json"), peer("torch_resnet_compile.json")
    line += (f" pytorch={tr['resnet_step_ms']:.2f}ms ratio={ours / tr['resnet_step_ms']:.2f}"
             if tr else " pytorch=not-found")
    if tc:
        line += f" pytorch_compile={tc['resnet_step_ms']:.2f}ms"
    print(line + " target=1.0")
else:
    print("bench gpu_resnet50_train_step_b128: not-run")
r = m.get("BM_ResNet50TrainStepBf16")
if r:
    ours = r["real_time"]
    line = f"bench gpu_resnet50_train_step_bf16_b128: step={ours:.2f}ms"
    tb = peer("torch_resnet_bf16.json")
    line += (f" pytorch={tb['resnet_step_ms']:.2f}ms ratio={ours / tb['resnet_step_ms']:.2f}"
             if tb else " pytorch=not-found")
    print(line + " target=1.0")
else:
    print("bench gpu_resnet50_train_step_bf16_b128: not-run")
PY
step cuda_ipc_bench 60 "$bundle/run.sh" cuda_ipc_bench --mib 64 --reps 20 ||
  echo "bench cuda_ipc_64mib: failed"
