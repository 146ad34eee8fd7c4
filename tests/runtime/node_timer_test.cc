// What the executor does with a device's node timer (framework/node_timer.h), on a CPU device
// that brings its own, as a GPU does: each node it runs is bracketed once, the timer's seconds
// (not the host's) are what profiling reports, and a timer's error fails the run naming the
// device. The GPU's own timer is tested on a GPU (tests/ops/cuda/cuda_device_test.cc).
#include "framework/node_timer.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

// Counts what the executor asked of it and reports 0.25 s for every node it timed.
struct TimerLog {
  std::mutex mu;
  std::map<int, int> begun, ended;
  int collected = 0;
  bool fail = false;
};

class CountingTimer final : public NodeTimer {
 public:
  explicit CountingTimer(TimerLog* log) : log_(log) {}
  void Begin(int node) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->begun[node];
  }
  void End(int node) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->ended[node];
    timed_.push_back(node);
  }
  Status Collect(std::vector<double>& seconds) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->collected;
    if (log_->fail) return Internal("reading the clock of /device:TIMED:0 failed");
    for (int node : timed_) seconds[node] += 0.25;
    return Status::OK();
  }

 private:
  TimerLog* log_;
  std::vector<int> timed_;
};

// A CPU device (its allocator and kernels) whose nodes are timed by CountingTimer.
class TimedCpuDevice final : public Device {
 public:
  TimedCpuDevice(std::unique_ptr<Device> cpu, TimerLog* log)
      : Device(cpu->name()), cpu_(std::move(cpu)), log_(log) {}
  Allocator* allocator() override { return cpu_->allocator(); }
  MemoryStats memory() const override { return cpu_->memory(); }
  void ResetPeak() override { cpu_->ResetPeak(); }
  Result<Tensor> CopyFromHost(const Tensor& host) override { return host; }
  Result<Tensor> CopyToHost(const Tensor& tensor) override { return tensor; }
  std::unique_ptr<NodeTimer> NewNodeTimer() override {
    return std::make_unique<CountingTimer>(log_);
  }

 private:
  std::unique_ptr<Device> cpu_;
  TimerLog* log_;
};

struct Fixture {
  TimerLog log;
  Graph graph = Graph();
  std::unique_ptr<TimedCpuDevice> device;
  std::unique_ptr<ExecutionPlan> plan;
  int x = -1, t = -1, y = -1;

  void Build() {
    Scope root = Scope::NewRootScope();
    auto in = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{4});
    auto th = ops::Tanh(root.WithOpName("t"), in);
    ops::Mul(root.WithOpName("y"), th, ops::Const(root.WithOpName("two"), 2.0f));
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    graph = root.graph();
    ASSERT_TRUE(graph.Validate().ok());
    x = *graph.FindNode("x");
    t = *graph.FindNode("t");
    y = *graph.FindNode("y");
    // From the factory, which registers the CPU's kernels.
    auto cpu = DeviceFactory::Global().Create(*DeviceName::Parse("cpu:0"), {.threads = {1, 1}});
    ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
    device = std::make_unique<TimedCpuDevice>(std::move(cpu).value(), &log);
    PlanSpec spec;
    spec.feeds = {x};
    spec.fetches = {{y, 0}};
    auto p = ExecutionPlan::Compile(graph, spec, device.get());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    plan = std::move(p).value();
  }

  Status Run(std::vector<double>* seconds, std::vector<Tensor>* out) {
    ExecutionPlan::RunOptions options;
    options.node_seconds = seconds;
    return plan->Run({Tensor::FromVector<float>({-1, 0, 0.5f, 2}, Shape{4})}, out, options);
  }
};

TEST(NodeTimerTest, ProfilingReportsTheDevicesSecondsForEveryNodeItRan) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Build());
  std::vector<double> seconds(f.graph.num_nodes(), 0.0);
  std::vector<Tensor> out;
  for (int run = 1; run <= 2; ++run) {
    ASSERT_TRUE(f.Run(&seconds, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_FLOAT_EQ(out[0].data<float>()[2], std::tanh(0.5f) * 2);
    EXPECT_EQ(f.log.collected, run);
    // Every node the run computed, once per run: Tanh, Mul and the constant.
    for (int node : {f.t, f.y, *f.graph.FindNode("two")}) {
      EXPECT_EQ(f.log.begun[node], run) << f.graph.node(node).name();
      EXPECT_EQ(f.log.ended[node], run) << f.graph.node(node).name();
      // The timer's figures, not the host's clock: exactly 0.25 s a run.
      EXPECT_DOUBLE_EQ(seconds[node], 0.25 * run) << f.graph.node(node).name();
    }
  }
  // Without profiling no timer is asked for.
  ASSERT_TRUE(f.plan->Run({Tensor::FromVector<float>({1, 2, 3, 4}, Shape{4})}, &out).ok());
  EXPECT_EQ(f.log.collected, 2);
  EXPECT_EQ(f.log.begun[f.t], 2);
}

TEST(NodeTimerTest, ATimersErrorFailsTheRunNamingTheDevice) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Build());
  f.log.fail = true;
  std::vector<double> seconds(f.graph.num_nodes(), 0.0);
  std::vector<Tensor> out;
  Status s = f.Run(&seconds, &out);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_TRUE(MessageHas(s, {"TIMED:0"})) << s.ToString();
  for (double v : seconds) EXPECT_EQ(v, 0.0);
  // The next run, its timer well, goes on.
  f.log.fail = false;
  EXPECT_TRUE(f.Run(&seconds, &out).ok());
}

}  // namespace
}  // namespace dflow
