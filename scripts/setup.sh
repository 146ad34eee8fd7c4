#!/usr/bin/env bash
# Installs every Debian package dflow needs to build, test and benchmark.
# Idempotent: when everything is present it only checks and returns in about a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-format clang libclang-rt-dev
  libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libomp-dev ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  libflatbuffers-dev flatbuffers-compiler
  libcli11-dev nlohmann-json3-dev
  libucx-dev
  zlib1g-dev
  libonnx-dev libprotobuf-dev libonnx-testdata
  graphviz
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
