#!/usr/bin/env bash
# Installs dflow from BUILD_DIR into a scratch prefix, then builds the program of CONSUMER_DIR
# outside dflow's tree against it twice, with CMake's find_package(dflow) and with pkg-config,
# and runs both; and runs the installed tools. Fails if either build sees dflow's source tree.
# Usage: install_test.sh BUILD_DIR CONSUMER_DIR SOURCE_DIR
set -euo pipefail
build=$1 consumer=$2 source=$3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dflow-install-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix

echo "== cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
test -f "$prefix/include/dflow/dflow.h"
test -f "$prefix/include/dflow/version.h"
test -f "$prefix/lib/cmake/dflow/dflowConfig.cmake"
test -f "$prefix/lib/pkgconfig/dflow.pc"
# The program's sources are copied out: nothing of the tree is within reach of its build.
cp -r "$consumer" "$scratch/src"

echo "== find_package(dflow) build"
cmake -S "$scratch/src" -B "$scratch/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/cmake-build"
if ninja -C "$scratch/cmake-build" -t commands | grep -F -- "$source"; then
  echo "the CMake build of the program used dflow's source tree ($source)" >&2
  exit 1
fi
mkdir "$scratch/run-cmake"
"$scratch/cmake-build/consumer" "$scratch/run-cmake"

echo "== pkg-config build"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
version=$(pkg-config --modversion dflow)
echo "pkg-config: dflow $version"
flags=$(pkg-config --cflags --libs dflow)
if grep -qF -- "$source" <<<"$flags"; then
  echo "pkg-config's flags name dflow's source tree: $flags" >&2
  exit 1
fi
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++20 -O1 "$scratch/src/main.cc" -o "$scratch/consumer-pc" $flags
mkdir "$scratch/run-pc"
"$scratch/consumer-pc" "$scratch/run-pc"

echo "== installed tools"
for tool in dflow-run dflow-dot; do
  out=$("$prefix/bin/$tool" --version)
  echo "$out"
  grep -qF "$version" <<<"$out"
done
"$prefix/bin/dflow-dot" "$scratch/run-pc/linear.dfg" >"$scratch/linear.dot"
grep -q "digraph" "$scratch/linear.dot"
echo "install test: passed"
