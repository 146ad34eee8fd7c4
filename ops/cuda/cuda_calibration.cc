#include "ops/cuda/cuda_calibration.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <mutex>

#include "ops/cuda/cuda_device.h"

namespace dflow {

DeviceSpec CudaCalibration::Apply(DeviceSpec spec) const {
  spec.peak_flops = peak_flops;
  spec.memory_bandwidth = memory_bandwidth > 0 ? memory_bandwidth : theoretical_bandwidth;
  spec.launch_overhead_s = launch_overhead_s;
  return spec;
}

namespace {

#define DFLOW_RETURN_IF_CUDA(call, what)                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      return Internal("calibrating gpu:{}: {} failed: {}", ordinal, what, cudaGetErrorString(e_)); \
    }                                                                                              \
  } while (false)

// FP32 lanes per SM: the CUDA programming guide's arithmetic throughput table.
int Fp32LanesPerSm(int major, int minor) {
  if (major >= 9) return 128;  // Hopper and later
  if (major == 8) return minor == 0 ? 64 : 128;
  if (major == 7) return 64;
  return 64;
}

// Owns what a measurement allocated.
struct Buffers {
  int ordinal = 0;
  void* device_a = nullptr;
  void* device_b = nullptr;
  void* host = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Buffers() {
    if (stop) cudaEventDestroy(stop);
    if (start) cudaEventDestroy(start);
    if (stream) cudaStreamDestroy(stream);
    if (host) cudaFreeHost(host);
    if (device_b) cudaFree(device_b);
    if (device_a) cudaFree(device_a);
  }
};

// Seconds of the fastest of three runs of `copy` on b.stream, timed by events.
template <typename F>
Result<double> BestSeconds(Buffers& b, F&& copy) {
  const int ordinal = b.ordinal;
  DFLOW_RETURN_IF_CUDA(copy(), "a warm-up copy");
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    DFLOW_RETURN_IF_CUDA(cudaEventRecord(b.start, b.stream), "recording an event");
    DFLOW_RETURN_IF_CUDA(copy(), "a timed copy");
    DFLOW_RETURN_IF_CUDA(cudaEventRecord(b.stop, b.stream), "recording an event");
    DFLOW_RETURN_IF_CUDA(cudaEventSynchronize(b.stop), "waiting for a copy");
    float ms = 0;
    DFLOW_RETURN_IF_CUDA(cudaEventElapsedTime(&ms, b.start, b.stop), "reading an event");
    const double s = ms / 1e3;
    if (i == 0 || s < best) best = s;
  }
  return best;
}

}  // namespace

Result<CudaCalibration> CalibrateCuda(int ordinal) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (ordinal < 0 || ordinal >= count) {
    return NotFound("no gpu:{} to calibrate: this process has {} GPU(s){}", ordinal, count,
                    why.empty() ? "" : " (" + why + ")");
  }
  const auto began = std::chrono::steady_clock::now();
  int before = 0;
  cudaGetDevice(&before);
  DFLOW_RETURN_IF_CUDA(cudaSetDevice(ordinal), "making the GPU current");
  CudaCalibration c;
  c.ordinal = ordinal;
  cudaDeviceProp prop{};
  DFLOW_RETURN_IF_CUDA(cudaGetDeviceProperties(&prop, ordinal), "reading its properties");
  c.name = prop.name;
  c.sm_count = prop.multiProcessorCount;
  c.compute_major = prop.major;
  c.compute_minor = prop.minor;
  c.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  int clock_khz = 0, mem_clock_khz = 0;
  DFLOW_RETURN_IF_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, ordinal),
                       "reading the clock");
  DFLOW_RETURN_IF_CUDA(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, ordinal),
                       "reading the memory clock");
  c.peak_flops = 0.7 * c.sm_count * Fp32LanesPerSm(prop.major, prop.minor) * 2.0 * clock_khz * 1e3;
  c.theoretical_bandwidth = 2.0 * mem_clock_khz * 1e3 * prop.memoryBusWidth / 8.0;

  constexpr size_t kBytes = size_t{64} << 20;
  Buffers b;
  b.ordinal = ordinal;
  DFLOW_RETURN_IF_CUDA(cudaMalloc(&b.device_a, kBytes), "allocating 64 MiB");
  DFLOW_RETURN_IF_CUDA(cudaMalloc(&b.device_b, kBytes), "allocating 64 MiB");
  DFLOW_RETURN_IF_CUDA(cudaMallocHost(&b.host, kBytes), "allocating 64 MiB of pinned memory");
  DFLOW_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking),
                       "creating a stream");
  DFLOW_RETURN_IF_CUDA(cudaEventCreate(&b.start), "creating an event");
  DFLOW_RETURN_IF_CUDA(cudaEventCreate(&b.stop), "creating an event");
  auto copy = [&](void* dst, const void* src, cudaMemcpyKind kind) {
    return [&b, dst, src, kind] { return cudaMemcpyAsync(dst, src, kBytes, kind, b.stream); };
  };
  ASSIGN_OR_RETURN(double d2d,
                   BestSeconds(b, copy(b.device_b, b.device_a, cudaMemcpyDeviceToDevice)));
  ASSIGN_OR_RETURN(double h2d, BestSeconds(b, copy(b.device_a, b.host, cudaMemcpyHostToDevice)));
  ASSIGN_OR_RETURN(double d2h, BestSeconds(b, copy(b.host, b.device_a, cudaMemcpyDeviceToHost)));
  c.memory_bandwidth = 2.0 * kBytes / d2d;
  c.host_to_device = {10e-6, kBytes / h2d, true};
  c.device_to_host = {10e-6, kBytes / d2h, true};
  c.to_peer.resize(count);
  for (int peer = 0; peer < count; ++peer) {
    if (peer == ordinal) continue;
    int can = 0;
    cudaDeviceCanAccessPeer(&can, ordinal, peer);
    if (can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    }
    void* remote = nullptr;
    DFLOW_RETURN_IF_CUDA(cudaSetDevice(peer), "making a peer current");
    cudaError_t e = cudaMalloc(&remote, kBytes);
    cudaSetDevice(ordinal);
    if (e != cudaSuccess) continue;  // no room on the peer: the default link stays
    auto seconds = BestSeconds(b, [&] {
      return cudaMemcpyPeerAsync(remote, peer, b.device_a, ordinal, kBytes, b.stream);
    });
    cudaFree(remote);
    if (!seconds.ok()) return seconds.status();
    c.to_peer[peer] = {10e-6, kBytes / *seconds, true};
  }
  cudaSetDevice(before);
  c.seconds_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return c;
}

Result<CudaCalibration> CachedCudaCalibration(int ordinal) {
  static std::mutex mu;
  static auto* cache = new std::map<int, CudaCalibration>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(ordinal);
  if (it != cache->end()) return it->second;
  ASSIGN_OR_RETURN(CudaCalibration c, CalibrateCuda(ordinal));
  cache->emplace(ordinal, c);
  return c;
}

}  // namespace dflow
