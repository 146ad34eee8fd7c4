// Calibration: measured figures for this process's virtual CPU devices, the defaults of a
// multi-device session's device specs (placer/device_set.h).
//
//   peak_flops         a dense layer's three f32 MatMuls in training (128 rows through a
//                      1024 x 1024 weight: forward, input gradient, weight gradient) through the
//                      CPU kernel, on a device with the given threads (best of a few runs each)
//   memory_bandwidth   a 16 MiB copy: bytes read plus bytes written per second
//   launch_overhead_s  a chain of 512 cheap nodes (Neg of a scalar): seconds per node
//   same_process       a scalar bounced between two devices through Send/Recv: the seconds per
//                      hop beyond the three nodes it runs (Send, Recv, Neg), and the copy's
//                      bandwidth (a hand-off copies nothing; a copy is the worst case)
//
// It times compiled plans directly on devices of its own (no session, no placer), in about a
// tenth of a second. CachedCpuCalibration measures once per thread count and
// process and hands out the same figures after.
#pragma once

#include "graph/status.h"
#include "placer/device_set.h"

namespace dflow {

struct CpuCalibration {
  double peak_flops = 0;
  double memory_bandwidth = 0;
  double launch_overhead_s = 0;
  LinkSpec same_process;
  double seconds_taken = 0;  // what the measurement itself took

  // `spec` with the measured figures (name, host and memory kept).
  DeviceSpec Apply(DeviceSpec spec) const;
};

// Measures with devices of `threads_per_device` threads (>= 1).
Result<CpuCalibration> CalibrateCpu(int threads_per_device);
Result<CpuCalibration> CachedCpuCalibration(int threads_per_device);

}  // namespace dflow
