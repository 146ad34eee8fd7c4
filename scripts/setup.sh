#!/usr/bin/env bash
# Installs every Debian package dflow needs to build, test and benchmark (Slurm, munge and Open
# MPI for the launch tests, which start daemons of their own: none is started here), and the ONNX
# Runtime peer (npm's onnxruntime-node, without its install scripts) in $DFLOW_PEERS_DIR/ort
# (default /opt/dflow-peers/ort), which the ONNX model tests and the benchmarks compare with.
# Idempotent: when everything is present it only checks and returns in about a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-format clang libclang-rt-dev lld
  libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libomp-dev ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  libflatbuffers-dev flatbuffers-compiler
  libcli11-dev nlohmann-json3-dev
  libucx-dev
  zlib1g-dev
  libonnx-dev libprotobuf-dev libonnx-testdata
  graphviz
  dataset-fashion-mnist
  python3-torch python3-torchvision python3-numpy python3-yaml
  slurmd slurmctld slurm-client munge openmpi-bin
)
# node and npm: Debian's, unless a node is already there (it brings its own npm).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

ort_version=1.30.0
ort_dir="${DFLOW_PEERS_DIR:-/opt/dflow-peers}/ort"
if [ ! -f "$ort_dir/node_modules/onnxruntime-node/package.json" ] ||
  ! grep -q "\"version\": \"$ort_version\"" "$ort_dir/node_modules/onnxruntime-node/package.json"; then
  echo "setup: installing onnxruntime-node $ort_version in $ort_dir"
  $SUDO mkdir -p "$ort_dir"
  (cd "$ort_dir" && $SUDO npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
    "onnxruntime-node@$ort_version" >/dev/null)
fi
echo "setup: done"
