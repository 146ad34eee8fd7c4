#include "runtime/step_trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "framework/rendezvous.h"
#include "serialization/file_util.h"

namespace dflow {

void AddDeviceTrace(const std::string& device, const Graph& graph,
                    const std::vector<NodeSpan>& spans, int64_t step_id, StepTrace* trace) {
  DeviceTrace& d = trace->devices.emplace_back();
  d.device = device;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    if (spans[v].start_ns < 0) continue;
    const Node& node = graph.node(v);
    TracedNode& t = d.nodes.emplace_back();
    t.name = node.name();
    t.op = node.op();
    t.span = spans[v];
    if (node.role() == OpRole::kSend || node.role() == OpRole::kRecv) {
      t.transfer = RendezvousKeyOf(node, step_id).ToString();
    }
  }
}

int CurrentThreadIndex() {
  static std::atomic<int> next{0};
  thread_local int index = next.fetch_add(1, std::memory_order_relaxed);
  return index;
}

int64_t TraceClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

using nlohmann::json;

// Where a slice landed in the file, for the flow arrows.
struct Placed {
  int pid = -1;
  int tid = -1;
  double ts = 0;  // a time inside the slice
};

constexpr int kRecvTrackBase = 100000;  // tids of the recv tracks: above any thread's

json Metadata(const char* name, int pid, int tid, json args) {
  json e = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

// The micro-batch of a pipelined graph's node ("microbatchM/NAME", placer/pipeline.h; also
// inside a replica's scope, "replica1/microbatchM/NAME"), or -1.
int MicroBatchOf(std::string_view name) {
  constexpr std::string_view kPrefix = "microbatch";
  for (size_t at = name.find(kPrefix); at != std::string_view::npos;
       at = name.find(kPrefix, at + 1)) {
    if (at > 0 && name[at - 1] != '/') continue;
    size_t i = at + kPrefix.size();
    int m = 0;
    const size_t digits = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && m < 1'000'000) {
      m = m * 10 + (name[i++] - '0');
    }
    if (i > digits && i < name.size() && name[i] == '/') return m;
  }
  return -1;
}

}  // namespace

std::string ChromeTraceJson(const std::vector<StepTrace>& steps) {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const auto& step : steps) {
    for (const auto& d : step.devices) {
      for (const auto& n : d.nodes) {
        if (n.span.start_ns >= 0) t0 = std::min(t0, n.span.start_ns);
      }
    }
  }
  auto micros = [&](int64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };

  json events = json::array();
  std::map<std::string, int> pids;  // device -> pid, in order of appearance
  struct Tracks {
    int thread_tracks = 0;
    // Recv tracks by the time their last slice ended, earliest first.
    std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>,
                        std::greater<>>
        recv_free;
    int recv_tracks = 0;
  };
  std::vector<Tracks> tracks;
  auto pid_of = [&](const std::string& device) {
    auto [it, fresh] = pids.try_emplace(device, static_cast<int>(pids.size()));
    if (fresh) {
      tracks.emplace_back();
      events.push_back(Metadata("process_name", it->second, -1, {{"name", device}}));
      events.push_back(
          Metadata("process_sort_index", it->second, -1, {{"sort_index", it->second}}));
    }
    return it->second;
  };

  int64_t flow_id = 0;
  for (const auto& step : steps) {
    // A Recv is ready as soon as the step starts; its slice shows the transfer, from its Send's
    // start (when later) to the tensor's arrival.
    std::unordered_map<std::string_view, int64_t> send_start;
    for (const auto& d : step.devices) {
      for (const auto& n : d.nodes) {
        if (!n.transfer.empty() && !n.span.async) send_start[n.transfer] = n.span.start_ns;
      }
    }
    // The step's Send and Recv slices by rendezvous key.
    std::unordered_map<std::string_view, std::pair<Placed, Placed>> transfers;
    for (const auto& d : step.devices) {
      const int pid = pid_of(d.device);
      struct Item {
        const TracedNode* node;
        int64_t start, end;
      };
      std::vector<Item> order;
      for (const auto& n : d.nodes) {
        if (n.span.start_ns < 0) continue;
        int64_t start = n.span.start_ns;
        if (n.span.async) {
          if (auto it = send_start.find(n.transfer); it != send_start.end()) {
            start = std::max(start, it->second);
          }
        }
        order.push_back({&n, start, std::max(n.span.end_ns, start)});
      }
      // Recv tracks are packed in start order so that no two transfers overlap on one track.
      std::sort(order.begin(), order.end(),
                [](const Item& a, const Item& b) { return a.start < b.start; });
      // A device's threads are numbered per step in the order they started work: a step's
      // runner thread is a new OS thread each step, and it keeps one track across steps.
      std::map<int, int> thread_tid;
      for (const auto& [n, start, end] : order) {
        Tracks& t = tracks[pid];
        auto name_track = [&](int tid, std::string name) {
          events.push_back(Metadata("thread_name", pid, tid, {{"name", std::move(name)}}));
          events.push_back(Metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
        };
        int tid;
        if (n->span.async) {
          int lane;
          if (!t.recv_free.empty() && t.recv_free.top().first <= start) {
            lane = t.recv_free.top().second;
            t.recv_free.pop();
          } else {
            lane = t.recv_tracks++;
            name_track(kRecvTrackBase + lane, fmt::format("recv {}", lane));
          }
          t.recv_free.emplace(end, lane);
          tid = kRecvTrackBase + lane;
        } else {
          tid = thread_tid.try_emplace(n->span.thread, static_cast<int>(thread_tid.size()) + 1)
                    .first->second;
          if (tid > t.thread_tracks) {
            t.thread_tracks = tid;
            name_track(tid, fmt::format("thread {}", tid - 1));
          }
        }
        const double ts = micros(start);
        const double dur = static_cast<double>(end - start) / 1000.0;
        json args = {{"op", n->op}, {"step", step.step}};
        if (int m = MicroBatchOf(n->name); m >= 0) args["micro_batch"] = m;
        events.push_back({{"ph", "X"},
                          {"name", n->name},
                          {"cat", n->op},
                          {"pid", pid},
                          {"tid", tid},
                          {"ts", ts},
                          {"dur", dur},
                          {"args", std::move(args)}});
        if (!n->transfer.empty()) {
          auto& pair = transfers[n->transfer];
          (n->span.async ? pair.second : pair.first) = Placed{pid, tid, ts + dur / 2};
        }
      }
    }
    // Flow events bind to the slice enclosing their time on their track ("bp":"e" for the end).
    auto flow = [&](const char* phase, const Placed& at) {
      json e = {{"ph", phase},   {"name", "tensor"}, {"cat", "transfer"}, {"id", flow_id},
                {"pid", at.pid}, {"tid", at.tid},    {"ts", at.ts}};
      if (phase[0] == 'f') e["bp"] = "e";
      events.push_back(std::move(e));
    };
    for (const auto& [key, pair] : transfers) {
      const auto& [send, recv] = pair;
      if (send.pid < 0 || recv.pid < 0) continue;  // one side did not run (an aborted step)
      ++flow_id;
      flow("s", send);
      flow("f", recv);
    }
  }
  json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status WriteChromeTrace(const std::vector<StepTrace>& steps, const std::string& path) {
  return serialization::WriteFileAtomically(path, ChromeTraceJson(steps));
}

}  // namespace dflow
