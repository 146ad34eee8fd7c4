#!/usr/bin/env bash
# Packs the GPU tests, benchmarks and examples for a machine with a GPU but none of dflow's
# Debian packages: the binaries, stripped, with every shared library they load except the C
# runtime, the NVIDIA driver and the CUDA toolkit's cuBLAS and cuDNN (hundreds of MiB; the GPU
# machine's toolkit has them, and run.sh finds them there), into one compressed file small
# enough to carry to it (64 MiB).
#
#   scripts/gpu_bundle.sh                 # builds in build/ (test.sh's), writes .gpu/dflow-gpu.tar.xz
#   # there:  tar -xJf .gpu/dflow-gpu.tar.xz -C /tmp && /tmp/dflow-gpu/run.sh cuda_tests
#
# DFLOW_GPU_BUILD names another build folder; DFLOW_GPU_TARGETS the binaries (default: the test
# binaries that hold GPU tests, the benchmarks scripts/gpu_bench.sh runs and the examples that
# train on a GPU). The output folder .gpu/ is ignored by git.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFLOW_GPU_BUILD:-build}
targets=${DFLOW_GPU_TARGETS:-cuda_tests runtime_tests op_conformance_tests distributed_tests dflow-worker cuda_ipc_peer gpu_bench cuda_ipc_bench models_bench resnet50 fashion_mnist_mlp fashion_mnist_cnn}
out=.gpu
limit=$((64 << 20))

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDFLOW_BUILD_BENCH=ON \
    >/dev/null
fi
if ! grep -q "^DFLOW_WITH_CUDA:STRING=\(AUTO\|ON\)" "$build/CMakeCache.txt"; then
  echo "gpu_bundle: $build is configured without CUDA (DFLOW_WITH_CUDA=OFF)" >&2
  exit 1
fi
# shellcheck disable=SC2086
cmake --build "$build" --target $targets

stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage=$stage_root/dflow-gpu
mkdir -p "$stage/bin" "$stage/lib"
for t in $targets; do
  if [ ! -x "$build/bin/$t" ]; then
    echo "gpu_bundle: $build/bin/$t was not built" >&2
    exit 1
  fi
  cp "$build/bin/$t" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$t"
done

# The libraries the binaries load, as this machine resolves them, less what every Linux has
# (the C library and its loader) and the driver's (libcuda comes with the GPU machine's driver).
missing=$(ldd "$stage"/bin/* | awk '/=> not found/ {print $1}' | sort -u)
if [ -n "$missing" ]; then
  echo "gpu_bundle: libraries not found here: $missing" >&2
  exit 1
fi
for lib in $(ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*.so.* | \
      libcuda.so.* | libnvidia-*.so.* | libcublas*.so.* | libcudnn*.so.*) continue ;;
  esac
  cp -L "$lib" "$stage/lib/"
done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true

cat >"$stage/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs one of the bundled binaries with the bundled libraries: run.sh BINARY [ARGS...]
#   run.sh --print-library-path   the library path it would use, and where cuBLAS/cuDNN were found
#   run.sh --ldd                  ldd of every bundled binary under that path
here=$(cd "$(dirname "$0")" && pwd)
# cuBLAS and cuDNN come from the machine's CUDA toolkit or from PyTorch's wheels (nvidia/*/lib
# of the python that holds torch, often a virtualenv's site-packages).
dirs="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu"
for py in ${DFLOW_GPU_PYTHON:-} python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  nv=$("$py" -c 'import nvidia, os; print(" ".join(os.path.abspath(p) for p in nvidia.__path__))' \
    2>/dev/null) || continue
  for root in $nv; do
    dirs="$dirs $(find "$root" -maxdepth 3 -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ' ')"
  done
  break
done
for d in $(ls -d /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
  /usr/lib/python3/dist-packages/nvidia/*/lib 2>/dev/null); do
  dirs="$dirs $d"
done
libpath="$here/lib"
for d in $dirs; do [ -d "$d" ] && libpath="$libpath:$d"; done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
case "${1:-}" in
  --print-library-path)
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for pattern in 'libcublas.so*' 'libcublasLt.so*' 'libcudnn.so*' 'libcudart.so*' 'libcuda.so*'; do
      found=""
      for d in $(echo "$LD_LIBRARY_PATH" | tr ':' ' ') /usr/local/nvidia/lib64 /usr/lib64; do
        found="$found $(ls "$d"/$pattern 2>/dev/null | head -n 2 | tr '\n' ' ')"
      done
      echo "$pattern:${found:- not found}"
    done
    exit 0 ;;
  --ldd)
    for b in "$here"/bin/*; do
      ldd "$b" | sed "s|^|$(basename "$b"): |"
    done
    exit 0 ;;
esac
bin=$1
shift
exec "$here/bin/$bin" "$@"
EOF
chmod +x "$stage/run.sh"

mkdir -p "$out"
XZ_OPT=-6 tar -cJf "$out/dflow-gpu.tar.xz" -C "$stage_root" dflow-gpu
size=$(stat -c %s "$out/dflow-gpu.tar.xz")
echo "gpu_bundle: $out/dflow-gpu.tar.xz: $((size >> 20)) MiB ($(ls "$stage/bin" | wc -l) binaries," \
  "$(ls "$stage/lib" | wc -l) libraries)"
if [ "$size" -gt "$limit" ]; then
  echo "gpu_bundle: larger than the 64 MiB a device run may carry; bundle fewer targets" >&2
  exit 1
fi
