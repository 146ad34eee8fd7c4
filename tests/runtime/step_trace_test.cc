// Traced steps: every node that ran has a span on its device, the spans respect the graph's
// edges, each Send meets its Recv, and the Chrome trace file shows it all (tracks per device,
// slices that never overlap on a track, one flow per Send/Recv pair).
#include "runtime/step_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ops/array_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "runtime/session.h"
#include "serialization/file_util.h"
#include "test_util.h"

namespace dflow {
namespace {

using nlohmann::json;
using testing::Devices;
using testing::MessageHas;

// x -> MatMul (cpu:0) -> Tanh, Sigmoid (cpu:1) -> Add (cpu:1) -> Neg (cpu:0): tensors cross
// both ways.
struct TwoDeviceGraph {
  Scope root = Scope::NewRootScope();
  Output out;
  TwoDeviceGraph() {
    Scope d0 = root.WithDevice("cpu:0"), d1 = root.WithDevice("cpu:1");
    auto x = ops::Placeholder(d0.WithOpName("x"), DType::kF32, Shape{64, 64});
    auto a = ops::MatMul(d0.WithOpName("a"), x, x);
    auto t = ops::Tanh(d1.WithOpName("t"), a);
    auto s = ops::Sigmoid(d1.WithOpName("s"), a);
    auto c = ops::Add(d1.WithOpName("c"), t, s);
    out = ops::Neg(d0.WithOpName("out"), c);
  }
  Session::Feeds Feeds() const {
    return {{"x", Tensor::FromVector(testing::RandomFloats(64 * 64, 3), Shape{64, 64})}};
  }
};

std::map<std::string, const TracedNode*> ByName(const DeviceTrace& d) {
  std::map<std::string, const TracedNode*> m;
  for (const auto& n : d.nodes) m[n.name] = &n;
  return m;
}

TEST(StepTraceTest, EveryNodeOfEveryPartitionRanInEdgeOrder) {
  TwoDeviceGraph g;
  auto session = LocalSession::Create(g.root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto plan = (*session)->PlanFor(g.Feeds(), {g.out.name()});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  StepTrace trace;
  Session::RunOptions options;
  options.trace = &trace;
  auto r = (*session)->Run(g.Feeds(), {g.out.name()}, {}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(trace.step, 1);
  ASSERT_EQ(trace.devices.size(), 2u);

  std::map<std::string, const TracedNode*> sends, recvs;
  for (int p = 0; p < (*plan)->num_partitions(); ++p) {
    const Graph& pg = (*plan)->partition_graph(p);
    const DeviceTrace& d = trace.devices[p];
    EXPECT_EQ(d.device, (*session)->device_set().device((*plan)->partition_device(p)).canonical());
    auto traced = ByName(d);
    ASSERT_EQ(traced.size(), static_cast<size_t>(pg.num_nodes())) << d.device;
    for (int v = 0; v < pg.num_nodes(); ++v) {
      const Node& node = pg.node(v);
      ASSERT_TRUE(traced.count(node.name())) << node.name() << " not traced";
      const TracedNode& t = *traced[node.name()];
      EXPECT_EQ(t.op, node.op());
      EXPECT_LE(t.span.start_ns, t.span.end_ns) << t.name;
      EXPECT_GE(t.span.thread, 0);
      EXPECT_EQ(t.span.async, node.op() == "_Recv") << t.name;
      // A node starts after each of its inputs ended (a Recv ends when its tensor arrived).
      for (const Endpoint& e : node.inputs()) {
        const TracedNode& in = *traced[pg.node(e.node).name()];
        EXPECT_GE(t.span.start_ns, in.span.end_ns) << in.name << " -> " << t.name;
      }
      if (node.op() == "_Send") sends[t.transfer] = &t;
      if (node.op() == "_Recv") recvs[t.transfer] = &t;
    }
  }
  // Each Send meets one Recv with the same key, and the Recv ends after the Send started.
  ASSERT_EQ(sends.size(), static_cast<size_t>((*plan)->send_recv_pairs()));
  ASSERT_EQ(recvs.size(), sends.size());
  EXPECT_GE(sends.size(), 2u);  // a to cpu:1, c back to cpu:0
  for (const auto& [key, send] : sends) {
    ASSERT_TRUE(recvs.count(key)) << key;
    EXPECT_GE(recvs[key]->span.end_ns, send->span.start_ns) << key;
    EXPECT_NE(key.find("/device:CPU:"), std::string::npos) << key;
  }
}

struct Slice {
  double ts, dur;
  std::string name;
};

// The parsed file: slices per (pid, tid), process names, flow events by id.
struct ParsedTrace {
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::vector<Slice>> tracks;
  std::map<int64_t, std::vector<json>> flows;
  int slices = 0;
  explicit ParsedTrace(const std::string& text) {
    json j = json::parse(text);
    for (const json& e : j.at("traceEvents")) {
      std::string ph = e.at("ph");
      if (ph == "M" && e.at("name") == "process_name") {
        processes[e.at("pid")] = e.at("args").at("name");
      } else if (ph == "X") {
        tracks[{e.at("pid"), e.at("tid")}].push_back({e.at("ts"), e.at("dur"), e.at("name")});
        ++slices;
      } else if (ph == "s" || ph == "f") {
        flows[e.at("id")].push_back(e);
      }
    }
  }
  // The slice of track (pid, tid) that holds time ts, or nullptr.
  const Slice* At(int pid, int tid, double ts) const {
    auto it = tracks.find({pid, tid});
    if (it == tracks.end()) return nullptr;
    for (const Slice& s : it->second) {
      if (s.ts <= ts && ts <= s.ts + s.dur) return &s;
    }
    return nullptr;
  }
};

TEST(StepTraceTest, ChromeTraceHasDeviceTracksSlicesAndSendRecvFlows) {
  TwoDeviceGraph g;
  auto session = LocalSession::Create(g.root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<StepTrace> steps(3);
  size_t traced = 0;
  for (auto& step : steps) {
    Session::RunOptions options;
    options.trace = &step;
    ASSERT_TRUE((*session)->Run(g.Feeds(), {g.out.name()}, {}, options).ok());
    for (const auto& d : step.devices) traced += d.nodes.size();
  }
  EXPECT_EQ(steps[0].step + 2, steps[2].step);
  auto plan = (*session)->PlanFor(g.Feeds(), {g.out.name()});
  ASSERT_TRUE(plan.ok());

  std::string path = ::testing::TempDir() + "/trace_test.json";
  ASSERT_TRUE(WriteChromeTrace(steps, path).ok());
  auto text = serialization::ReadFile(path);
  ASSERT_TRUE(text.ok());
  ParsedTrace t(*text);
  // One process per device, named by it.
  ASSERT_EQ(t.processes.size(), 2u);
  std::set<std::string> names;
  for (const auto& [pid, name] : t.processes) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"/job:localhost/task:0/device:CPU:0",
                                          "/job:localhost/task:0/device:CPU:1"}));
  EXPECT_EQ(t.slices, static_cast<int>(traced));
  // Slices on one track never overlap.
  for (auto& [track, slices] : t.tracks) {
    std::sort(slices.begin(), slices.end(),
              [](const Slice& a, const Slice& b) { return a.ts < b.ts; });
    for (size_t i = 1; i < slices.size(); ++i) {
      EXPECT_GE(slices[i].ts, slices[i - 1].ts + slices[i - 1].dur - 1e-3)
          << slices[i - 1].name << " overlaps " << slices[i].name;
    }
  }
  // One flow per Send/Recv pair and step, from a _send slice to a _recv slice on the other
  // device.
  EXPECT_EQ(t.flows.size(), 3u * (*plan)->send_recv_pairs());
  for (const auto& [id, events] : t.flows) {
    ASSERT_EQ(events.size(), 2u) << id;
    const json& s = events[0].at("ph") == "s" ? events[0] : events[1];
    const json& f = events[0].at("ph") == "s" ? events[1] : events[0];
    ASSERT_EQ(s.at("ph"), "s");
    ASSERT_EQ(f.at("ph"), "f");
    EXPECT_EQ(f.at("bp"), "e");
    EXPECT_NE(s.at("pid"), f.at("pid"));
    const Slice* send = t.At(s.at("pid"), s.at("tid"), s.at("ts"));
    const Slice* recv = t.At(f.at("pid"), f.at("tid"), f.at("ts"));
    ASSERT_NE(send, nullptr);
    ASSERT_NE(recv, nullptr);
    EXPECT_NE(send->name.find("/_send_"), std::string::npos) << send->name;
    EXPECT_NE(recv->name.find("/_recv_"), std::string::npos) << recv->name;
    EXPECT_EQ(send->name.substr(0, send->name.find("/_send_")),
              recv->name.substr(0, recv->name.find("/_recv_")));
  }
}

TEST(StepTraceTest, OneDeviceTraceHasEveryPlannedNodeAndNoFlows) {
  TwoDeviceGraph g;
  SessionOptions one;
  one.device = "cpu:0";
  Graph unpinned;
  for (int id = 0; id < g.root.graph().num_nodes(); ++id) {
    NodeDef def = g.root.graph().node(id).def();
    def.device.clear();
    ASSERT_TRUE(unpinned.AddNode(std::move(def)).ok());
  }
  auto session = LocalSession::Create(std::move(unpinned), one);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto planned = (*session)->PlannedGraph(g.Feeds(), {g.out.name()});
  ASSERT_TRUE(planned.ok());
  StepTrace trace;
  Session::RunOptions options;
  options.trace = &trace;
  ASSERT_TRUE((*session)->Run(g.Feeds(), {g.out.name()}, {}, options).ok());
  ASSERT_EQ(trace.devices.size(), 1u);
  EXPECT_EQ(trace.devices[0].device, "/job:localhost/task:0/device:CPU:0");
  EXPECT_EQ(trace.devices[0].nodes.size(), static_cast<size_t>((*planned)->num_nodes()));
  ParsedTrace t(ChromeTraceJson({trace}));
  EXPECT_EQ(t.slices, (*planned)->num_nodes());
  EXPECT_TRUE(t.flows.empty());
}

// A failed step is traced up to the error: what ran before it is there, the rest is not.
TEST(StepTraceTest, AFailedStepKeepsWhatRan) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice("cpu:0"), DType::kF32, Shape{2});
  auto checked = ops::CheckNumerics(root.WithOpName("check").WithDevice("cpu:0"), x, "input");
  auto far = ops::Tanh(root.WithOpName("far").WithDevice("cpu:1"), checked);
  auto session = LocalSession::Create(root, Devices(2));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  StepTrace trace;
  Session::RunOptions options;
  options.trace = &trace;
  options.timeout = std::chrono::milliseconds(20000);
  auto r = (*session)->Run({{"x", Tensor::FromVector<float>({1, std::nanf("")}, Shape{2})}},
                           {far.name()}, {}, options);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  std::set<std::string> ran;
  for (const auto& d : trace.devices) {
    for (const auto& n : d.nodes) ran.insert(n.name);
  }
  EXPECT_TRUE(ran.count("x"));
  EXPECT_TRUE(ran.count("check"));  // it ran and failed
  EXPECT_FALSE(ran.count("far"));
  // The file of a failed step is still well formed; the unmatched Recv gets no flow.
  ParsedTrace t(ChromeTraceJson({trace}));
  EXPECT_TRUE(t.flows.empty());
}

// Recvs waiting at the same time go on separate tracks; a later one reuses a free track.
TEST(StepTraceTest, OverlappingRecvWaitsGetSeparateTracks) {
  StepTrace step;
  step.step = 1;
  DeviceTrace& d = step.devices.emplace_back();
  d.device = "/job:localhost/task:0/device:CPU:0";
  auto add = [&](const char* name, int64_t start, int64_t end, bool async) {
    d.nodes.push_back({name, async ? "_Recv" : "Neg", {start, end, 0, async}, ""});
  };
  add("r0", 1000, 5000, true);
  add("r1", 2000, 6000, true);    // overlaps r0
  add("r2", 5500, 7000, true);    // r0's track is free again
  add("n", 1000, 3000, false);    // a thread track, overlapping the waits
  add("skipped", -1, -1, false);  // did not run: not in the file
  ParsedTrace t(ChromeTraceJson({step}));
  EXPECT_EQ(t.slices, 4);
  std::map<std::string, int> tid;
  for (const auto& [track, slices] : t.tracks) {
    for (const Slice& s : slices) tid[s.name] = track.second;
  }
  EXPECT_NE(tid["r0"], tid["r1"]);
  EXPECT_EQ(tid["r0"], tid["r2"]);
  EXPECT_NE(tid["n"], tid["r0"]);
  EXPECT_NE(tid["n"], tid["r1"]);
  // Times are relative to the first start, in microseconds.
  const Slice* r1 = t.At(0, tid["r1"], 1.0);
  ASSERT_NE(r1, nullptr);
  EXPECT_DOUBLE_EQ(r1->ts, 1.0);
  EXPECT_DOUBLE_EQ(r1->dur, 4.0);
}

// A pipelined graph's nodes carry their micro-batch in the slice's args ("micro_batch"); other
// nodes have none.
TEST(StepTraceTest, MicroBatchNodesAreLabelled) {
  StepTrace step;
  step.step = 1;
  DeviceTrace& d = step.devices.emplace_back();
  d.device = "/job:localhost/task:0/device:CPU:0";
  int64_t t = 1000;
  for (const char* name : {"microbatch3/dense1/MatMul", "replica1/microbatch12/loss", "dense1",
                           "microbatch/x", "x/microbatch_split", "my_microbatch2/y"}) {
    d.nodes.push_back({name, "Neg", {t, t + 100, 0, false}, ""});
    t += 200;
  }
  auto parsed = nlohmann::json::parse(ChromeTraceJson({step}));
  std::map<std::string, int> micro_batch;
  for (const auto& e : parsed["traceEvents"]) {
    if (e["ph"] != "X") continue;
    micro_batch[e["name"]] =
        e["args"].contains("micro_batch") ? e["args"]["micro_batch"].get<int>() : -1;
  }
  EXPECT_EQ(micro_batch["microbatch3/dense1/MatMul"], 3);
  EXPECT_EQ(micro_batch["replica1/microbatch12/loss"], 12);
  EXPECT_EQ(micro_batch["dense1"], -1);
  EXPECT_EQ(micro_batch["microbatch/x"], -1);
  EXPECT_EQ(micro_batch["x/microbatch_split"], -1);
  EXPECT_EQ(micro_batch["my_microbatch2/y"], -1);
}

// A Recv ready at the step's start shows the transfer: its slice starts when its Send did.
TEST(StepTraceTest, ARecvSliceStartsAtItsSend) {
  StepTrace step;
  step.step = 4;
  step.devices.resize(2);
  DeviceTrace& d0 = step.devices[0];
  d0.device = "/job:localhost/task:0/device:CPU:0";
  DeviceTrace& d1 = step.devices[1];
  d1.device = "/job:localhost/task:0/device:CPU:1";
  const std::string key =
      "a:0;/job:localhost/task:0/device:CPU:0;/job:localhost/task:0/device:CPU:1";
  d0.nodes.push_back({"a", "MatMul", {0, 10000, 3, false}, ""});
  d0.nodes.push_back({"a/_send_0_to_cpu1", "_Send", {10000, 11000, 3, false}, key});
  d1.nodes.push_back({"a/_recv_0_on_cpu1", "_Recv", {500, 14000, 4, true}, key});
  d1.nodes.push_back({"b", "Tanh", {15000, 16000, 4, false}, ""});
  ParsedTrace t(ChromeTraceJson({step}));
  ASSERT_EQ(t.slices, 4);
  const Slice* recv = nullptr;
  for (const auto& [track, slices] : t.tracks) {
    for (const Slice& s : slices) {
      if (s.name == "a/_recv_0_on_cpu1") recv = &s;
    }
  }
  ASSERT_NE(recv, nullptr);
  EXPECT_DOUBLE_EQ(recv->ts, 10.0);
  EXPECT_DOUBLE_EQ(recv->dur, 4.0);
  ASSERT_EQ(t.flows.size(), 1u);
}

TEST(StepTraceTest, AnUnwritablePathIsAnErrorNamingIt) {
  StepTrace step;
  Status s = WriteChromeTrace({step}, "/nonexistent_dflow_dir/trace.json");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(MessageHas(s, {"/nonexistent_dflow_dir/trace.json"})) << s.ToString();
}

}  // namespace
}  // namespace dflow
