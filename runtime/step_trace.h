// StepTrace: when and where every node of a step ran, and the Chrome trace (Perfetto) file made
// from traced steps.
//
//   StepTrace trace;
//   session->Run(feeds, fetches, targets, {.trace = &trace});
//   WriteChromeTrace({trace}, "step.json");  // open in ui.perfetto.dev or chrome://tracing
//
// The file has one process per device (named by the device), thread tracks for the executor
// threads that ran nodes there (numbered per step in the order they started: steps traced one
// after another share tracks), a slice per node (named by the node, its op as the category),
// and a flow arrow from each Send to the Recv that received its tensor. A Recv's slice shows the
// transfer: from its Send's start (or its own, when later) until its tensor arrived. Recvs
// waiting at the same time go on separate "recv" tracks, so slices never overlap on a track.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"

namespace dflow {

// One node's run: steady-clock nanoseconds (start_ns < 0: the node did not run) and the
// executor thread that started it (CurrentThreadIndex()).
struct NodeSpan {
  int64_t start_ns = -1;
  int64_t end_ns = -1;
  int thread = -1;
  bool async = false;  // a node whose completion is awaited (Recv): the span includes the wait
};

// A small number naming the calling thread for the life of the process: 0 for the first thread
// that asks, then 1, 2, ...
int CurrentThreadIndex();

// Steady-clock nanoseconds, the clock of NodeSpan.
int64_t TraceClockNs();

struct TracedNode {
  std::string name;
  std::string op;
  NodeSpan span;
  // Send and Recv: the rendezvous key they share (ops/rendezvous.h); empty for other nodes.
  std::string transfer;
};

struct DeviceTrace {
  std::string device;  // canonical name
  std::vector<TracedNode> nodes;
};

struct StepTrace {
  int64_t step = 0;  // the session's step count, from 1
  std::vector<DeviceTrace> devices;
};

// Appends to `trace` the nodes of `graph` (a partition) that ran on `device` (a canonical name)
// in step `step_id`, with their spans (indexed by node id); Sends and Recvs get the rendezvous
// key of that step, which pairs them across devices and processes.
void AddDeviceTrace(const std::string& device, const Graph& graph,
                    const std::vector<NodeSpan>& spans, int64_t step_id, StepTrace* trace);

// The Chrome trace event JSON of `steps` (times relative to the earliest node start, in µs).
std::string ChromeTraceJson(const std::vector<StepTrace>& steps);
// Writes ChromeTraceJson atomically; errors name the file.
Status WriteChromeTrace(const std::vector<StepTrace>& steps, const std::string& path);

}  // namespace dflow
