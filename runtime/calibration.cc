#include "runtime/calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_rendezvous.h"
#include "runtime/partitioned_plan.h"

namespace dflow {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best of `runs` timed calls of `run` (after one warm-up call).
Result<double> BestRun(const std::function<Status()>& run, int runs) {
  RETURN_IF_ERROR(run());
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(run());
    best = std::min(best, Seconds(start));
  }
  return best;
}

// Calibration times compiled plans directly, on devices of its own: no session, no placer.
struct Bench {
  std::vector<std::unique_ptr<Device>> devices;
  DeviceSet set;
  Graph graph;
  std::unique_ptr<PartitionedPlan> plan;
  LocalRendezvousFactory rendezvous;
  int64_t step = 0;

  // Compiles the scope's graph with every node on the device its scope requested (cpu:N).
  static Result<std::unique_ptr<Bench>> Make(const Scope& root, int num_devices, int threads,
                                             const std::string& fetch) {
    auto b = std::make_unique<Bench>();
    RETURN_IF_ERROR(root.status());
    b->graph = root.graph();
    RETURN_IF_ERROR(b->graph.Validate());
    std::vector<Device*> raw;
    for (int i = 0; i < num_devices; ++i) {
      ASSIGN_OR_RETURN(auto d,
                       DeviceFactory::Global().Create(DeviceName::Full("localhost", 0, "CPU", i),
                                                      {.threads = {threads, 1}}));
      DeviceSpec spec;
      spec.name = d->name();
      spec.incarnation = d->incarnation();
      RETURN_IF_ERROR(b->set.Add(spec));
      raw.push_back(d.get());
      b->devices.push_back(std::move(d));
    }
    std::vector<int> device_of(b->graph.num_nodes(), 0);
    for (int v = 0; v < b->graph.num_nodes(); ++v) {
      const std::string& want = b->graph.node(v).requested_device();
      if (want.empty()) continue;
      ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(want));
      device_of[v] = name.index.value_or(0);
    }
    PlanSpec spec;
    spec.fetches = {{*b->graph.FindNode(fetch), 0}};
    spec.plan_memory = false;
    ASSIGN_OR_RETURN(b->plan, PartitionedPlan::Compile(b->graph, device_of, b->set, raw, spec,
                                                       {.plan_memory = false}));
    return b;
  }
  Status Run() {
    std::vector<Tensor> out;
    PartitionedPlan::RunOptions options;
    options.step_id = ++step;
    options.rendezvous = &rendezvous;
    return plan->Run({}, &out, options);
  }
};

Result<double> Time(const Scope& root, int num_devices, int threads, const std::string& fetch) {
  ASSIGN_OR_RETURN(auto bench, Bench::Make(root, num_devices, threads, fetch));
  return BestRun([&] { return bench->Run(); }, 4);
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

  {  // A dense layer's three products in training, as one micro-batch of 128 rows through a
     // 1024 x 1024 weight: forward (x w), the input's gradient (dy w^T), the weight's (x^T dy).
     // Weights that do not stay in cache and transposed operands run below a small square
     // product's rate (a warm 384^3 ran ~5% faster here), and the placer predicts these.
    constexpr int64_t kRows = 128, kWidth = 1024;
    Tensor x(DType::kF32, Shape{kRows, kWidth}), w(DType::kF32, Shape{kWidth, kWidth});
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = (i % 7) * 0.125f;
    for (int64_t i = 0; i < w.num_elements(); ++i) w.data<float>()[i] = (i % 5) * 0.0625f;
    double seconds = 0;
    for (ops::MatMulAttrs attrs : {ops::MatMulAttrs{}, ops::MatMulAttrs{.transpose_b = true},
                                   ops::MatMulAttrs{.transpose_a = true}}) {
      Scope root = Scope::NewRootScope();
      Output a = ops::Const(root, x),
             b = attrs.transpose_a ? ops::Const(root, x) : ops::Const(root, w);
      ops::MatMul(root.WithOpName("y"), a, b, attrs);
      ASSIGN_OR_RETURN(double t, Time(root, 1, threads, "y"));
      seconds += t;
    }
    c.peak_flops = 3 * 2.0 * kRows * kWidth * kWidth / seconds;
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
    ASSIGN_OR_RETURN(double t, Time(root, 1, threads, "out"));
    c.launch_overhead_s = t / kChain;
  }
  {  // Link latency: a scalar bounced between two devices.
    constexpr int kHops = 64;
    Scope root = Scope::NewRootScope();
    Output x = ops::Const(root.WithDevice("cpu:0"), 1.0f);
    for (int i = 0; i < kHops; ++i) x = ops::Neg(root.WithDevice(i % 2 ? "cpu:0" : "cpu:1"), x);
    ops::Identity(root.WithOpName("out").WithDevice(kHops % 2 ? "cpu:1" : "cpu:0"), x);
    ASSIGN_OR_RETURN(double t, Time(root, 2, threads, "out"));
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
