#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example: the wide MLP that the placer splits
# across two CPU devices (model parallelism), trained on Fashion-MNIST. Flags pass through
# (--epochs N, --devices, --device-memory-mib, --log-placement; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target model_parallel_mlp
exec build/bin/model_parallel_mlp "$@"
