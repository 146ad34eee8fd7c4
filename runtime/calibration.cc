#include "runtime/calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"

namespace dflow {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best of `runs` timed runs of a session (after one warm-up run).
Result<double> BestRun(Session& session, const std::string& fetch, int runs) {
  RETURN_IF_ERROR(session.Run({}, {fetch}).status());
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(session.Run({}, {fetch}).status());
    best = std::min(best, Seconds(start));
  }
  return best;
}

SessionOptions Plain(int threads) {
  SessionOptions options;
  options.threads = {threads, 1};
  options.calibrate_devices = false;  // no calibration inside calibration
  options.plan_memory = false;
  return options;
}

}  // namespace

DeviceSpec CpuCalibration::Apply(DeviceSpec spec) const {
  spec.peak_flops = peak_flops;
  spec.memory_bandwidth = memory_bandwidth;
  spec.launch_overhead_s = launch_overhead_s;
  return spec;
}

Result<CpuCalibration> CalibrateCpu(int threads) {
  if (threads < 1) return InvalidArgument("calibration needs at least one thread, got {}", threads);
  auto begin = std::chrono::steady_clock::now();
  CpuCalibration c;

  {  // A matmul.
    constexpr int64_t kN = 384;
    Scope root = Scope::NewRootScope();
    Tensor a(DType::kF32, Shape{kN, kN});
    for (int64_t i = 0; i < a.num_elements(); ++i) a.data<float>()[i] = (i % 7) * 0.125f;
    ops::MatMul(root.WithOpName("y"), ops::Const(root, a), ops::Const(root, a));
    ASSIGN_OR_RETURN(auto session, Session::Create(root, Plain(threads)));
    ASSIGN_OR_RETURN(double t, BestRun(*session, "y", 4));
    c.peak_flops = 2.0 * kN * kN * kN / t;
  }
  {  // A copy.
    constexpr size_t kBytes = 16 << 20;
    std::vector<char> from(kBytes, 1), to(kBytes, 0);
    double best = 1e30;
    for (int i = 0; i < 4; ++i) {
      auto start = std::chrono::steady_clock::now();
      std::memcpy(to.data(), from.data(), kBytes);
      best = std::min(best, Seconds(start));
      from[i] = to[kBytes - 1 - i];  // keep the copies observable
    }
    c.memory_bandwidth = 2.0 * kBytes / best;
  }
  {  // Launch overhead: a chain of cheap nodes.
    constexpr int kChain = 512;
    Scope root = Scope::NewRootScope();
    Output x = ops::Const(root, 1.0f);
    for (int i = 0; i < kChain; ++i) x = ops::Neg(root, x);
    ops::Identity(root.WithOpName("out"), x);
    ASSIGN_OR_RETURN(auto session, Session::Create(root, Plain(threads)));
    ASSIGN_OR_RETURN(double t, BestRun(*session, "out", 4));
    c.launch_overhead_s = t / kChain;
  }
  {  // Link latency: a scalar bounced between two devices.
    constexpr int kHops = 64;
    Scope root = Scope::NewRootScope();
    Output x = ops::Const(root.WithDevice("cpu:0"), 1.0f);
    for (int i = 0; i < kHops; ++i) x = ops::Neg(root.WithDevice(i % 2 ? "cpu:0" : "cpu:1"), x);
    ops::Identity(root.WithOpName("out").WithDevice(kHops % 2 ? "cpu:1" : "cpu:0"), x);
    SessionOptions options = Plain(2 * threads);
    options.devices = {"cpu:0", "cpu:1"};
    options.placer.merge_chains = false;
    ASSIGN_OR_RETURN(auto session, Session::Create(root, options));
    ASSIGN_OR_RETURN(double t, BestRun(*session, "out", 4));
    double per_hop = t / kHops - 3 * c.launch_overhead_s;
    c.same_process.latency_s = std::max(per_hop, 0.1e-6);
    c.same_process.bandwidth = c.memory_bandwidth / 2;
  }
  c.seconds_taken = Seconds(begin);
  return c;
}

Result<CpuCalibration> CachedCpuCalibration(int threads) {
  static std::mutex mu;
  static std::map<int, CpuCalibration> done;
  std::lock_guard lock(mu);
  auto it = done.find(threads);
  if (it != done.end()) return it->second;
  ASSIGN_OR_RETURN(CpuCalibration c, CalibrateCpu(threads));
  done.emplace(threads, c);
  return c;
}

}  // namespace dflow
