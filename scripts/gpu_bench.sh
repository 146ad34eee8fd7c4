#!/usr/bin/env bash
# The GPU benchmarks, run on a machine with a GPU from the bundle of scripts/gpu_bundle.sh (see
# the README's "To run on a GPU"), each against its peer in the same run, one summary line each:
#   bench gpu_matmul_4096: step=...ms cublas=...ms ratio=...        (target <= 1.10)
#   bench gpu_conv2d_3x3: step=...ms cudnn=...ms ratio=...          (target <= 1.10)
#   bench gpu_{mlp,cnn}_train_step_b128: step=...ms pytorch=...ms ratio=...
#   bench gpu_resnet50_train_step_b128: step=...ms pytorch=...ms ratio=... compile=...ms
#   bench cuda_ipc_64mib: transfer=...ms bandwidth=...GB/s d2d_copy=...ms ratio=...
# PyTorch is the GPU machine's python3 (bench/peers/torch_resnet.py, torch_gpu_models.py), in
# f32 without TF32 on both sides (DFLOW_ALLOW_TF32 unset; torch's allow_tf32 off).
#
#   scripts/gpu_bench.sh [BUNDLE_DIR]      # default /tmp/dflow-gpu
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-/tmp/dflow-gpu}
py=${DFLOW_GPU_PYTHON:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { "$bundle/run.sh" "$@"; }

run gpu_bench --benchmark_repetitions=5 --benchmark_format=json --benchmark_out="$out/gpu.json" \
  --benchmark_out_format=json >/dev/null
DFLOW_BENCH_DEVICE=gpu:0 DFLOW_BENCH_RESNET_BATCH=128 run models_bench \
  --benchmark_filter='TrainStep' --benchmark_repetitions=5 --benchmark_format=json \
  --benchmark_out="$out/models.json" --benchmark_out_format=json >/dev/null
if "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  "$py" bench/peers/torch_gpu_models.py > "$out/torch_models.json" 2>/dev/null ||
    rm -f "$out/torch_models.json"
  "$py" bench/peers/torch_resnet.py --device cuda --no-tf32 --steps 20 --warmup 5 \
    > "$out/torch_resnet.json" 2>/dev/null || rm -f "$out/torch_resnet.json"
  timeout 900 "$py" bench/peers/torch_resnet.py --device cuda --no-tf32 --compile --steps 20 \
    --warmup 5 > "$out/torch_resnet_compile.json" 2>/dev/null ||
    rm -f "$out/torch_resnet_compile.json"
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
                            ("BM_CnnTrainStep", "gpu_cnn_train_step_b128", "cnn_train_ms")]:
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
PY
run cuda_ipc_bench --mib 64 --reps 20 || echo "bench cuda_ipc_64mib: failed"
