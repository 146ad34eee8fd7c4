// CUDA IPC between two processes of one GPU against a device-to-device copy in one process.
// One transfer: this process exports the tensor, sends the handle down a pipe, the peer
// (cuda_ipc_peer) waits on the exporter's event, copies the bytes into its own memory, waits for
// the copy and answers; then the handle is released. Two ways (ops/cuda/cuda_ipc.h): the pool
// way (the tensor from the GPU's exportable pool, read by the peer where it lies: one copy) and
// the block way (copied into an exported block first: two copies). Prints
//   bench cuda_ipc_64mib: transfer=...ms bandwidth=...GB/s d2d_copy=...ms ratio=... way=pool
//     block_transfer=...ms
// (medians; the line's transfer is the pool way's where the GPU has an exportable pool), or a
// not-run line saying why where there is no GPU.
//
//   cuda_ipc_bench [--mib 64] [--reps 20] [--peer PATH]
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ops/cuda/cuda_device.h"
#include "ops/cuda/cuda_ipc.h"
#include "ops/cuda/cuda_ipc_peer.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 64;
  int reps = 20;
  std::string peer_path =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cuda_ipc_peer").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--mib") mib = std::stoul(argv[i + 1]);
    if (flag == "--reps") reps = std::max(1, std::stoi(argv[i + 1]));
    if (flag == "--peer") peer_path = argv[i + 1];
  }
  const std::string name = "cuda_ipc_" + std::to_string(mib) + "mib";
  std::string why;
  if (dflow::CudaDeviceCount(&why) == 0) {
    std::printf("bench %s: not-run (no GPU: %s)\n", name.c_str(), why.c_str());
    return 0;
  }
  const size_t bytes = mib << 20;
  // The peer first: it starts its own CUDA context while this one makes the buffers.
  auto peer = dflow::cuda::CudaIpcPeer::Start(peer_path, 0);
  auto exporter = dflow::CudaIpcExporter::Create(0);
  if (!peer.ok() || !exporter.ok()) {
    std::fprintf(stderr, "cuda_ipc_bench: %s\n",
                 (!peer.ok() ? peer.status() : exporter.status()).ToString().c_str());
    return 1;
  }
  auto exportable = dflow::PrepareTensorPool(0, 0);
  if (!exportable.ok()) {
    std::fprintf(stderr, "cuda_ipc_bench: %s\n", exportable.status().ToString().c_str());
    return 1;
  }
  cudaSetDevice(0);
  cudaStream_t stream = nullptr;
  void *src = nullptr, *dst = nullptr;
  // src as CudaAllocator's tensors are: from the GPU's current pool.
  if (cudaStreamCreate(&stream) != cudaSuccess ||
      cudaMallocAsync(&src, bytes, stream) != cudaSuccess ||
      cudaMalloc(&dst, bytes) != cudaSuccess ||
      cudaMemsetAsync(src, 0x5a, bytes, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    std::fprintf(stderr, "cuda_ipc_bench: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  // One way's median transfer: through the pool when `allocation` is set, else a block.
  auto transfers = [&](const void* allocation, double* median) {
    std::vector<double> times;
    for (int r = 0; r < reps + 3; ++r) {  // the first 3: warm-up (handles opened, blocks made)
      auto t0 = std::chrono::steady_clock::now();
      auto h =
          (*exporter)->Export(src, bytes, reinterpret_cast<dflow::CudaStream>(stream), allocation);
      if (!h.ok()) {
        std::fprintf(stderr, "cuda_ipc_bench: %s\n", h.status().ToString().c_str());
        return false;
      }
      auto copied = (*peer)->Copy(*h, false);
      if (!copied.ok()) {
        std::fprintf(stderr, "cuda_ipc_bench: %s\n", copied.status().ToString().c_str());
        return false;
      }
      (void)(*exporter)->Release(*h);
      if (r >= 3) times.push_back(MsSince(t0));
    }
    *median = Median(times);
    return true;
  };
  double pooled = 0, blocked = 0;
  if (!transfers(nullptr, &blocked) || (*exportable && !transfers(src, &pooled))) return 1;
  std::vector<double> d2d;
  for (int r = 0; r < reps + 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    cudaStreamSynchronize(stream);
    if (r >= 3) d2d.push_back(MsSince(t0));
  }
  const double t = *exportable ? pooled : blocked, c = Median(d2d);
  std::printf(
      "bench %s: transfer=%.3fms bandwidth=%.1fGB/s d2d_copy=%.3fms ratio=%.2f way=%s "
      "block_transfer=%.3fms\n",
      name.c_str(), t, bytes / t / 1e6, c, t / c, *exportable ? "pool" : "block", blocked);
  cudaFreeAsync(src, stream);
  cudaStreamSynchronize(stream);
  cudaFree(dst);
  cudaStreamDestroy(stream);
  return 0;
}
