#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example: the wide MLP that the placer splits
# across two CPU devices (model parallelism), trained on Fashion-MNIST. Flags pass through to
# build/bin/model_parallel_mlp: --devices N or cpu:0,cpu:1,... (as dflow-run takes them),
# --device-memory-mib MIB, --epochs N, --max-steps N (per epoch), --log-placement,
# --check-split, --fixed-costs; scripts/run.sh --help lists them all.
#   scripts/run.sh --devices cpu:0,cpu:1 --max-steps 20
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target model_parallel_mlp
exec build/bin/model_parallel_mlp "$@"
