#!/usr/bin/env bash
# Builds the benchmarks in Release mode, runs them and their peers on this machine, and prints
# one summary line per benchmark (medians):
#   bench <name>: <metric>=<value><unit> [<peer>=<value><unit> ratio=<ours/peer>]
# Peers are installed here when missing (PyTorch from Debian's python3-torch with
# libopenblas0-pthread; ONNX Runtime from npm's onnxruntime-node, installed with --ignore-scripts
# by scripts/setup.sh); a benchmark whose peer cannot be had prints our figure alone.
# Usage: scripts/bench.sh [onnx]   (onnx: only the imported models' lines, bench onnx_*)
set -euo pipefail
cd "$(dirname "$0")/.."
only=${1:-all}
if [ "$only" != all ] && [ "$only" != onnx ]; then
  echo "usage: scripts/bench.sh [onnx]" >&2
  exit 2
fi
scripts/setup.sh >/dev/null
build=${DFLOW_BENCH_BUILD:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLOW_BUILD_TESTS=OFF \
  -DDFLOW_BUILD_EXAMPLES=OFF >/dev/null
if [ "$only" = onnx ]; then
  cmake --build "$build" --target dflow-run >/dev/null
else
  cmake --build "$build" --target executor_bench models_bench placer_bench serialization_bench \
    dflow-run >/dev/null
fi
# The distributed benchmarks need UCX (built when found) and dflow-worker.
if [ "$only" = all ] &&
  cmake --build "$build" --target help 2>/dev/null | grep -q "^distributed_bench:"; then
  cmake --build "$build" --target distributed_bench dflow-worker >/dev/null
fi
reps=${DFLOW_BENCH_REPETITIONS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The peers: Debian's Python (PyTorch), ONNX Runtime from npm.
py=/usr/bin/python3
ort_dir="${DFLOW_PEERS_DIR:-/opt/dflow-peers}/ort"

if [ "$only" = all ]; then

# Repetitions of different benchmarks interleaved at random: a slow spell of this shared machine
# then spreads over all of them instead of biasing one side of a comparison (the checkpoint
# overhead compares two runs of one benchmark).
for b in executor_bench models_bench; do
  "$build/bin/$b" --benchmark_repetitions="$reps" --benchmark_format=json \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out/$b.json" --benchmark_out_format=json >/dev/null
done
# One repetition: the 1M-node placement alone takes tens of seconds.
"$build/bin/placer_bench" --benchmark_filter=-BM_PipelineStep --benchmark_format=json \
  --benchmark_out="$out/placer_bench.json" --benchmark_out_format=json >/dev/null
# The pipeline against one device: five repetitions of each, interleaved (a one-thread step
# swung 133-156 ms between runs of a minute apart), compared as medians (about 2 minutes).
"$build/bin/placer_bench" --benchmark_filter=BM_PipelineStep --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_format=json \
  --benchmark_out="$out/pipeline_bench.json" --benchmark_out_format=json >/dev/null
"$build/bin/serialization_bench" --benchmark_format=json \
  --benchmark_out="$out/serialization_bench.json" --benchmark_out_format=json >/dev/null

if [ -x "$build/bin/distributed_bench" ]; then
  "$build/bin/distributed_bench" --benchmark_repetitions=3 --benchmark_format=json \
    --benchmark_out="$out/distributed_bench.json" --benchmark_out_format=json >/dev/null \
    || rm -f "$out/distributed_bench.json"
fi

# ucx_perftest peer (ucx-utils): active messages with peer error handling (-e), as
# UcxTransport's endpoints use them, over TCP (UCX_TLS=tcp) and over shared memory
# (UCX_MM_ERROR_HANDLING=y, as UcxTransport sets it); three runs of each, the client's last line.
if ! command -v ucx_perftest >/dev/null; then
  echo "bench: installing the UCX peer (ucx-utils)..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    ucx-utils >/dev/null 2>&1 || true
fi
perftest() {  # ENV TEST SIZE ITERS -> the client's last line
  local port=$((20000 + RANDOM % 20000))
  env $1 timeout 60 ucx_perftest -p "$port" -e >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  env $1 timeout 60 ucx_perftest 127.0.0.1 -p "$port" -e -t "$2" -s "$3" -n "$4" -w 100 -f \
    2>/dev/null | tail -1
  wait "$server" 2>/dev/null || true
}
if command -v ucx_perftest >/dev/null; then
  for run in 1 2 3; do
    perftest UCX_TLS=tcp ucp_am_lat 8 20000 >> "$out/perf_lat_tcp.txt" || true
    perftest UCX_TLS=tcp ucp_am_bw 4194304 500 >> "$out/perf_bw_tcp.txt" || true
    perftest UCX_MM_ERROR_HANDLING=y ucp_am_lat 8 20000 >> "$out/perf_lat_shm.txt" || true
    perftest UCX_MM_ERROR_HANDLING=y ucp_am_bw 4194304 500 >> "$out/perf_bw_shm.txt" || true
  done
fi

# All-reduce peers on two processes: Open MPI's MPI_Allreduce (openmpi-bin, libopenmpi-dev) and
# PyTorch's gloo (below, once PyTorch is there). Sizes as BM_AllReduce2Proc's.
allreduce_sizes="262144 4194304 67108864"
if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then
  echo "bench: installing the MPI peer (openmpi-bin, libopenmpi-dev)..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    openmpi-bin libopenmpi-dev >/dev/null 2>&1 || true
fi
if command -v mpicxx >/dev/null && mkdir -p "$build/peers" &&
  mpicxx -O2 bench/peers/mpi_allreduce.cc -o "$build/peers/mpi_allreduce" 2>/dev/null; then
  # Root (CI) must say so to mpirun; two ranks on this host, over its shared memory.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 \
    mpirun -np 2 --oversubscribe "$build/peers/mpi_allreduce" $allreduce_sizes \
    > "$out/mpi_allreduce.json" 2>/dev/null || rm -f "$out/mpi_allreduce.json"
fi

# PyTorch peer: Debian's package, for Debian's interpreter.
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "bench: installing the PyTorch peer (python3-torch, libopenblas0-pthread)..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    python3-torch libopenblas0-pthread >/dev/null 2>&1 || true
fi
if "$py" -c "import torch" 2>/dev/null; then
  "$py" bench/peers/torch_models.py > "$out/torch.json" 2>/dev/null || rm -f "$out/torch.json"
  timeout 300 "$py" bench/peers/gloo_allreduce.py $allreduce_sizes > "$out/gloo_allreduce.json" \
    2>/dev/null || rm -f "$out/gloo_allreduce.json"
  timeout 300 "$py" bench/peers/torch_ddp_mlp.py > "$out/torch_ddp.json" 2>/dev/null ||
    rm -f "$out/torch_ddp.json"
  # ResNet-50 at BM_ResNet50TrainStep's batch, on as many threads as dflow uses (all cores).
  timeout 300 "$py" bench/peers/torch_resnet.py --batch-size 16 --steps 9 --warmup 2 \
    --threads "$(nproc)" > "$out/torch_resnet.json" 2>/dev/null || rm -f "$out/torch_resnet.json"
  timeout 300 "$py" bench/peers/torch_resnet.py --batch-size 16 --steps 9 --warmup 2 --bf16 \
    --threads "$(nproc)" > "$out/torch_resnet_bf16.json" 2>/dev/null ||
    rm -f "$out/torch_resnet_bf16.json"
fi

# ONNX Runtime peer: the same MLP exported from PyTorch, run by onnxruntime-node.
if [ ! -d "$ort_dir/node_modules/onnxruntime-node" ] && command -v npm >/dev/null; then
  mkdir -p "$ort_dir"
  (cd "$ort_dir" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node \
    >/dev/null 2>&1) || true
fi
if [ -d "$ort_dir/node_modules/onnxruntime-node" ] &&
  "$py" bench/peers/export_mlp_onnx.py "$out/mlp.onnx" >/dev/null 2>&1; then
  (cd "$ort_dir" && node "$OLDPWD/bench/peers/ort_mlp.mjs" "$out/mlp.onnx") > "$out/ort.json" \
    2>/dev/null || rm -f "$out/ort.json"
fi

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def medians(name):
    runs = json.load(open(os.path.join(out, name)))["benchmarks"]
    return {r["run_name"].split("/")[0]: r for r in runs if r.get("aggregate_name") == "median"}
ex = medians("executor_bench.json")
for key, name in [("BM_ExecutorChain", "executor_chain_100k"),
                  ("BM_ExecutorFanOutFanIn", "executor_fanout_100k"),
                  ("BM_ExecutorAddChain", "executor_add_chain_100k")]:
    ns = ex[key]["ns_per_node"]
    print(f"bench {name}: overhead={ns:.1f}ns/node target=300ns/node ratio={ns / 300:.2f}")
steps = {r["run_name"]: r for r in json.load(open(os.path.join(out, "executor_bench.json")))[
    "benchmarks"] if r.get("aggregate_name") == "median"}
one = steps["BM_PartitionedStepOverhead/1/min_time:1.000"]["real_time"]
two = steps["BM_PartitionedStepOverhead/2/min_time:1.000"]["real_time"]
print(f"bench partitioned_step_overhead_2dev: overhead={two:.1f}us target=20us "
      f"ratio={two / 20:.2f} one_device={one:.1f}us")
mlp = medians("models_bench.json")
def peer(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
torch, ort = peer("torch.json"), peer("ort.json")
def best(result, key):
    t = min((1, 2), key=lambda t: result[f"{key}_{t}t"])
    return t, result[f"{key}_{t}t"]
for key, name, peer_key in [("BM_MlpTrainStep", "mlp_train_step_b128", "train_ms"),
                            ("BM_MlpInference", "mlp_inference_b128", "infer_ms"),
                            ("BM_CnnTrainStep", "cnn_train_step_b128", "cnn_train_ms"),
                            ("BM_CnnTrainStepBf16", "cnn_train_step_bf16_b128",
                             "cnn_train_bf16_ms"),
                            ("BM_AdamUpdate", "adam_update_2048x2048", "adam_ms")]:
    ours = mlp[key]["real_time"]  # ms
    line = f"bench {name}: step={ours:.3f}ms"
    if torch and f"{peer_key}_1t" in torch:
        t, ms = best(torch, peer_key)
        line += f" pytorch{torch['version'].split('+')[0]}_{t}t={ms:.3f}ms ratio={ours / ms:.2f}"
    else:
        line += " pytorch=not-found"
    if key == "BM_CnnTrainStepBf16":
        line += f" f32_step={mlp['BM_CnnTrainStep']['real_time']:.3f}ms"
    if peer_key == "infer_ms":
        if ort:
            t, ms = best(ort, peer_key)
            line += f" onnxruntime{ort['version']}_{t}t={ms:.3f}ms ratio={ours / ms:.2f}"
        else:
            line += " onnxruntime=not-found"
    print(line)
for key, suffix, peer_file in [("BM_ResNet50TrainStep", "", "torch_resnet.json"),
                               ("BM_ResNet50TrainStepBf16", "_bf16", "torch_resnet_bf16.json")]:
    resnet = mlp.get(key)
    if not resnet:
        continue
    ours = resnet["real_time"]
    line = f"bench resnet50_train_step{suffix}_b{resnet['batch']:.0f}: step={ours:.1f}ms"
    tr = peer(peer_file)
    if tr:
        line += (f" pytorch_{tr['threads']}t={tr['resnet_step_ms']:.1f}ms "
                 f"ratio={ours / tr['resnet_step_ms']:.2f}")
    else:
        line += " pytorch=not-found"
    if suffix:
        line += f" f32_step={mlp['BM_ResNet50TrainStep']['real_time']:.1f}ms"
    print(line)
ck = {r["run_name"]: r for r in json.load(open(os.path.join(out, "models_bench.json")))[
    "benchmarks"] if r.get("aggregate_name") == "median"}
plain = ck.get("BM_MlpTrainCheckpointed/0/min_time:2.000")
saved = ck.get("BM_MlpTrainCheckpointed/1/min_time:2.000")
if plain and saved:
    print(f"bench checkpoint_overhead: step={saved['real_time']:.3f}ms (a checkpoint every 10 "
          f"steps, {saved['checkpoints_written']:.0f} written) no_checkpoints="
          f"{plain['real_time']:.3f}ms ratio={saved['real_time'] / plain['real_time']:.3f} "
          f"target=1.035")
pl = {r["run_name"]: r for r in json.load(open(os.path.join(out, "placer_bench.json")))["benchmarks"]}
targets = {"100000": 0.5, "1000000": 6}
for n in ("10000", "100000", "1000000"):
    r = pl[f"BM_PlaceAndPartition/{n}/iterations:1"]
    line = f"bench place_partition_{int(n) // 1000}k: time={r['real_time'] / 1000:.3f}s"
    if n in targets:
        line += f" target={targets[n]}s ratio={r['real_time'] / 1000 / targets[n]:.2f}"
    print(line + f" send_recv_pairs={r['send_recv_pairs']:.0f}")
se = {r["run_name"]: r for r in
      json.load(open(os.path.join(out, "serialization_bench.json")))["benchmarks"]}
for key, name in [("BM_SaveGraph", "graph_save_1000k"), ("BM_LoadGraph", "graph_load_1000k")]:
    r = se[f"{key}/1000000/iterations:3"]
    s = r["real_time"] / 1000
    first = f" first={r['first_load_s']:.3f}s" if "first_load_s" in r else ""
    print(f"bench {name}: time={s:.3f}s{first} target=1s ratio={s:.2f}")
one = pl["BM_ModelParallelStep/1/min_time:3.000"]["real_time"]
two = pl["BM_ModelParallelStep/2/min_time:3.000"]["real_time"]
print(f"bench model_parallel_step_b128: two_devices={two:.2f}ms one_device={one:.2f}ms "
      f"ratio={two / one:.2f}")
# Pipeline parallelism (placer_bench's BM_PipelineStep): 1F1B over two devices of one thread
# each, against one device of one thread (throughput target 1.6x), one device of both threads
# (target 0.9x) and the same two devices split without micro-batches. bound: the speedup this
# machine allows a 1F1B pipeline of the plan's K stages and M micro-batches, its two cores' own
# scaling (one device of two threads against one of one) times M / (M + K - 1). Medians of five
# interleaved repetitions each.
pipe = {r["name"]: r for r in
        json.load(open(os.path.join(out, "pipeline_bench.json")))["benchmarks"]}
pp = {m: pipe.get(f"BM_PipelineStep/{m}/min_time:3.000/real_time_median") for m in range(4)}
if all(pp.values()):
    t = {m: pp[m]["real_time"] for m in range(4)}
    p3 = pp[3]
    m, k = p3["micro_batches"], p3["stages"]
    print(f"bench pipeline_step_2stage: step={t[3]:.1f}ms one_device_1thread={t[0]:.1f}ms "
          f"speedup={t[0] / t[3]:.2f} target=1.6 bound={t[0] / t[1] * m / (m + k - 1):.2f} "
          f"one_device_2threads={t[1]:.1f}ms "
          f"throughput_ratio={t[1] / t[3]:.2f} target=0.9 split_without_microbatches={t[2]:.1f}ms "
          f"speedup={t[2] / t[3]:.2f} predicted={p3['predicted_ms']:.1f}ms "
          f"predicted/measured={p3['predicted_ms'] / t[3]:.2f} "
          f"profiled_predicted={p3['profiled_predicted_ms']:.1f}ms "
          f"profiled/measured={p3['profiled_predicted_ms'] / t[3]:.2f} target=0.85-1.15 "
          f"peak={p3['peak_mib_0']:.1f}+{p3['peak_mib_1']:.1f}MiB limit=64MiB")
dpath = os.path.join(out, "distributed_bench.json")
if os.path.exists(dpath):
    dist = {r["run_name"]: r for r in json.load(open(dpath))["benchmarks"]
            if r.get("aggregate_name") == "median"}
    def perf(name, column):  # the median over the runs' lines of one column
        path = os.path.join(out, name)
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        values = sorted(float(l.split()[column]) for l in lines if len(l.split()) > column)
        return values[len(values) // 2] if values else None
    for arg, medium in [(0, "tcp"), (1, "shm")]:
        lat = dist.get(f"BM_SendRecvLatency/{arg}/min_time:1.000/real_time")
        if lat:
            ours = lat["real_time"] / (2 * lat["round_trips"])  # us, mean of the round trips
            # perftest's overall latency: its run's time over its iterations, a mean like ours.
            peer = perf(f"perf_lat_{medium}.txt", 3)
            line = f"bench sendrecv_8b_{medium}: one_way={ours:.2f}us"
            line += (f" ucx_perftest_am_lat={peer:.2f}us ratio={ours / peer:.2f} target=1.3"
                     if peer else " ucx_perftest=not-found")
            print(line)
        bw = dist.get(f"BM_SendRecvBandwidth/{arg}/min_time:1.000/real_time")
        if bw:
            ours = bw["bytes_per_second"] / 1e9
            peer = perf(f"perf_bw_{medium}.txt", 5)  # overall MB/s (2^20)
            line = f"bench sendrecv_4mib_{medium}: bandwidth={ours:.2f}GB/s"
            if peer:
                peer = peer * 2**20 / 1e9
                line += f" ucx_perftest_am_bw={peer:.2f}GB/s ratio={ours / peer:.2f} target=0.9"
            else:
                line += " ucx_perftest=not-found"
            print(line)
    step = dist.get("BM_DistributedStepOverhead/min_time:1.000/real_time")
    if step:
        us = step["real_time"]
        print(f"bench distributed_step_overhead_2workers: overhead={us:.0f}us target=100us "
              f"ratio={us / 100:.2f}")
    two = dist.get("BM_ModelParallelStep2Proc/1/min_time:3.000/real_time")
    one = dist.get("BM_ModelParallelStep2Proc/0/min_time:3.000/real_time")
    if two and one:
        print(f"bench model_parallel_step_2proc: two_processes={two['real_time']:.2f}ms "
              f"(predicted {two['predicted_ms']:.2f}ms) in_process_two_devices="
              f"{one['real_time']:.2f}ms (predicted {one['predicted_ms']:.2f}ms) "
              f"ratio={two['real_time'] / one['real_time']:.2f}")
    pp2 = dist.get("BM_PipelineStep2Proc/min_time:3.000/real_time")
    if pp2 and all(pp.values()):
        # The pipeline's stages on two dflow-workers of one core each, against placer_bench's
        # one device of one thread and of both threads (targets as above).
        t2 = pp2["real_time"]
        print(f"bench pipeline_step_2stage_2proc: step={t2:.1f}ms "
              f"one_device_1thread={t[0]:.1f}ms speedup={t[0] / t2:.2f} target=1.6 "
              f"one_device_2threads={t[1]:.1f}ms throughput_ratio={t[1] / t2:.2f} target=0.9 "
              f"in_process={t[3]:.1f}ms predicted={pp2['predicted_ms']:.1f}ms "
              f"predicted/measured={pp2['predicted_ms'] / t2:.2f}")
    prof = dist.get("BM_ModelParallelStep2Proc/2/min_time:3.000/real_time")
    if prof:
        # Placed again with the node times of profiled steps (dflow-run --save-costs).
        print(f"bench model_parallel_step_2proc_profiled: two_processes={prof['real_time']:.2f}ms "
              f"predicted={prof['predicted_ms']:.2f}ms "
              f"predicted/measured={prof['predicted_ms'] / prof['real_time']:.2f} target=0.85-1.15")
    # Bus bandwidth as nccl-tests defines it: bytes / time x 2(n-1)/n, n = 2 processes.
    # (`peer` above is a figure by now, not the loader.)
    def peer_file(name):
        path = os.path.join(out, name)
        return json.load(open(path)) if os.path.exists(path) else None
    mpi, gloo = peer_file("mpi_allreduce.json"), peer_file("gloo_allreduce.json")
    shm = dist.get("BM_SendRecvBandwidth/1/min_time:1.000/real_time")
    for size, label in [(262144, "256kib"), (4194304, "4mib"), (67108864, "64mib")]:
        r = dist.get(f"BM_AllReduce2Proc/{size}/min_time:2.000/real_time")
        if not r:
            continue
        seconds = r["real_time"] / 1e3 / r["chain"]  # one all-reduce of the step's chain
        ours = size / seconds / 1e9
        line = f"bench allreduce_{label}_2proc: busbw={ours:.2f}GB/s time={seconds * 1e6:.0f}us"
        for peer_name, result, target in [("openmpi", mpi, 1.0), ("gloo", gloo, 2.0)]:
            if result and str(size) in result:
                theirs = size / result[str(size)] / 1e9
                line += (f" {peer_name}={theirs:.2f}GB/s ratio={ours / theirs:.2f}"
                         f" target={target:.1f}")
            else:
                line += f" {peer_name}=not-found"
        if shm:
            line += f" sendrecv_shm={shm['bytes_per_second'] / 1e9:.2f}GB/s"
        print(line)
    rec = dist.get("BM_RecoveryTime/iterations:3/manual_time")
    if rec:
        secs = rec["real_time"] / 1e3
        print(f"bench recovery_time: time={secs:.3f}s (kill -9 to the first step after, the "
              f"restart's {rec['restart_s']:.3f}s excluded) target=5s ratio={secs / 5:.2f}")
    dp = dist.get("BM_DataParallelMlp2Proc/min_time:3.000/real_time")
    if dp:
        ddp = peer_file("torch_ddp.json")
        line = (f"bench data_parallel_mlp_2proc: throughput={dp['examples_per_second']:.0f}ex/s "
                f"step={dp['real_time']:.2f}ms")
        if ddp:
            line += (f" pytorch{ddp['version'].split('+')[0]}_ddp_gloo="
                     f"{ddp['examples_per_s']:.0f}ex/s ratio="
                     f"{dp['examples_per_second'] / ddp['examples_per_s']:.2f} target=2.0")
        else:
            line += " pytorch_ddp=not-found"
        print(line)
for key, name, peer_key in [("BM_MlpTrainStep", "mlp_train_peak_memory_b128", "train_peak_bytes"),
                            ("BM_CnnTrainStep", "cnn_train_peak_memory_b128", "cnn_train_peak_bytes")]:
    r = mlp[key]
    ours = r["peak_bytes"] / 2**20
    line = (f"bench {name}: peak={ours:.2f}MiB arena={r['arena_bytes'] / 2**20:.2f}MiB "
            f"(unplanned {r['unplanned_bytes'] / 2**20:.2f}MiB)")
    if torch and peer_key in torch:
        theirs = torch[peer_key] / 2**20
        line += f" pytorch{torch['version'].split('+')[0]}={theirs:.2f}MiB ratio={ours / theirs:.2f}"
    else:
        line += " pytorch=not-found"
    print(line)
PY
fi  # only = all

# Imported models: ResNet-50 and MobileNetV2 at batch 1 and 32, the BERT-base-shaped encoder at
# batch 8 x sequence 128 and batch 1 x sequence 32, exported from PyTorch
# (bench/peers/export_models_onnx.py). dflow-run's median step and ONNX Runtime's on the same
# input, in $DFLOW_BENCH_ONNX_ROUNDS rounds (default 5) that take turns, dflow first in odd rounds
# and ORT first in even ones: this machine's speed drifts by 10-30% from minute to minute, so
# each round's ratio compares the two at one moment, and the line gives the medians over the
# rounds (the ratio is the median of the rounds' ratios, which are listed). ORT runs on 1 and 2
# intra-op threads in the first round and on the better of them after. The outputs are compared
# (a line on stderr when they differ by more than 1e-4 of their scale).
rounds=${DFLOW_BENCH_ONNX_ROUNDS:-5}
if [ -d "$ort_dir/node_modules/onnxruntime-node" ] && "$py" -c "import torchvision" 2>/dev/null; then
  for spec in resnet50:1:30 resnet50:32:5 mobilenet_v2:1:150 mobilenet_v2:32:10 encoder:8:5:128 \
    encoder:1:30:32; do
    IFS=: read -r model batch runs seq <<< "$spec"
    dir="$out/onnx_${model}_b$batch"
    "$py" bench/peers/export_models_onnx.py "$dir" --models "$model" --batch "$batch" \
      --seq "${seq:-128}" \
      >/dev/null 2>&1 || { echo "bench onnx_${model}_b$batch: export failed" >&2; continue; }
    feeds=()
    for f in "$dir/$model".*.npy; do
      name=$(basename "$f" .npy); name=${name#"$model".}
      [ "$name" = torch ] || feeds+=("$name=$f")
    done
    run_ours() {
      "$build/bin/dflow-run" "$dir/$model.onnx" "${feeds[@]/#/--feed=}" \
        --fetch "y=$dir/dflow.npy" --steps "$runs" 2>&1 |
        sed -n 's/.* steps: median \([0-9.]*\) ms.*/\1/p'
    }
    run_ort() {
      DFLOW_ORT_DIR="$ort_dir" DFLOW_ORT_THREADS="$ort_threads" node bench/peers/ort_models.mjs \
        "$dir/$model.onnx" "$dir/ort.npy" "$runs" "${feeds[@]}" 2>/dev/null || true
    }
    : > "$dir/rounds.txt"
    ort_threads=1,2
    for round in $(seq "$rounds"); do
      if [ $((round % 2)) = 1 ]; then
        ours=$(run_ours); ort=$(run_ort)
      else
        ort=$(run_ort); ours=$(run_ours)
      fi
      echo "${ours:-nan} ${ort:-none}" >> "$dir/rounds.txt"
      if [ "$round" = 1 ] && [ -n "$ort" ]; then  # later rounds: the better thread count only
        ort_threads=$("$py" -c 'import json, sys; r = json.loads(sys.argv[1])
print(min((1, 2), key=lambda t: r[f"ms_{t}t"]))' "$ort")
      fi
    done
    name="onnx_${model}_b$batch"
    [ "$model" = encoder ] && name="onnx_encoder_b${batch}_s$seq"
    "$py" - "$name" "$dir" <<'PY'
import json, os, statistics, sys
import numpy as np
name, d = sys.argv[1], sys.argv[2]
rounds = [line.split(" ", 1) for line in open(os.path.join(d, "rounds.txt")).read().splitlines()]
ours = [float(o) for o, _ in rounds]
line = f"bench {name}: step={statistics.median(ours):.2f}ms"
peers = [json.loads(r) for _, r in rounds if r.strip() != "none"]
if len(peers) == len(rounds):
    # Each round's better thread count (the first round's after it); the line names the one
    # most rounds chose.
    best = [min((t for t in (1, 2) if f"ms_{t}t" in r), key=lambda t: r[f"ms_{t}t"])
            for r in peers]
    t = max(set(best), key=best.count)
    theirs = [r[f"ms_{b}t"] for r, b in zip(peers, best)]
    ratios = [o / p for o, p in zip(ours, theirs)]
    line += (f" onnxruntime{peers[0]['version']}_{t}t={statistics.median(theirs):.2f}ms"
             f" ratio={statistics.median(ratios):.2f}"
             f" rounds={','.join(f'{r:.2f}' for r in ratios)}")
    a, b = np.load(os.path.join(d, "dflow.npy")), np.load(os.path.join(d, "ort.npy"))
    worst = float(np.abs(a - b).max() / np.abs(b).max())
    if not worst <= 1e-4:
        print(f"bench {name}: dflow's output differs from ONNX Runtime's by {worst:.2g} of its "
              f"scale", file=sys.stderr)
else:
    line += " onnxruntime=not-found"
print(line)
PY
    rm -rf "$dir"
  done
fi
