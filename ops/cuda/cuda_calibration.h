// GPU figures for the placer (framework/device_spec.h): a GPU's DeviceSpec and its links, from the
// device's properties plus a short measurement (about 50 ms per GPU, once per process):
//
//   peak_flops         FP32 lanes per SM (by compute capability) x SMs x 2 x the SM clock,
//                      times 0.7, what cuBLAS reaches on large f32 products
//   memory_bandwidth   a 64 MiB device-to-device copy: bytes read plus written per second
//                      (the properties' theoretical figure kept alongside)
//   host links         64 MiB copies from and to pinned host memory
//   peer links         64 MiB cudaMemcpyPeer to each other GPU (with peer access where it can
//                      be enabled; through the host otherwise)
//   launch_overhead_s  5 us: a kernel launch and the executor's hand-off
//
// Without CUDA or a GPU, CalibrateCuda is NotFound saying why.
#pragma once

#include <vector>

#include "framework/device_spec.h"
#include "graph/status.h"

namespace dflow {

struct CudaCalibration {
  int ordinal = 0;
  std::string name;  // the GPU's product name
  int sm_count = 0, compute_major = 0, compute_minor = 0;
  double memory_bytes = 0;           // the GPU's total memory
  double peak_flops = 0;             // see above
  double theoretical_bandwidth = 0;  // from the memory clock and bus width
  double memory_bandwidth = 0;       // measured
  LinkSpec host_to_device, device_to_host;
  std::vector<LinkSpec> to_peer;  // by ordinal; bandwidth 0 for itself
  double launch_overhead_s = 5e-6;
  double seconds_taken = 0;

  // `spec` with these figures (name, host and memory kept).
  DeviceSpec Apply(DeviceSpec spec) const;
};

Result<CudaCalibration> CalibrateCuda(int ordinal);
// Measured once per GPU and process.
Result<CudaCalibration> CachedCudaCalibration(int ordinal);

}  // namespace dflow
