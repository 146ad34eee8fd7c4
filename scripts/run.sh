#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example: training the Fashion-MNIST MLP
# (pass --epochs N and the other flags through; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target fashion_mnist_mlp
exec build/bin/fashion_mnist_mlp "$@"
