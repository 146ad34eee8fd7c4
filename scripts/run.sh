#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example: the wide MLP that the placer splits
# across two CPU devices (model parallelism), trained on Fashion-MNIST. Flags pass through to
# build/bin/model_parallel_mlp, which takes the placer's flags as dflow-run does: --devices
# cpu:0,cpu:1,..., --memory-limit 72MiB, --fixed-costs, --placer; and --epochs N,
# --steps-per-epoch N, --log-placement, --check-split; scripts/run.sh --help lists them all with
# their defaults.
#   scripts/run.sh --devices cpu:0,cpu:1 --steps-per-epoch 20
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target model_parallel_mlp
exec build/bin/model_parallel_mlp "$@"
