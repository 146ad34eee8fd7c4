#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target hello
exec build/bin/hello "$@"
