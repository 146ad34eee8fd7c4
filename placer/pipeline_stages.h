// Pipeline stages: where to cut a training step into K contiguous stages, one per device, and
// how long the pipelined step will take.
//
// The step comes as a chain of items: the forward pass's nodes in topological order, each with
// its share of one micro-batch's work (the forward node and the backward nodes that compute its
// gradients), its update's work once per step, the bytes it keeps across steps (variables,
// optimizer state, the accumulated gradients) and the bytes it keeps per micro-batch from its
// forward to its backward (activations). A stage is a run of consecutive items.
//
// Memory of stage s: its persistent bytes plus its activations times the micro-batches in
// flight there: all M under GPipe (every forward before any backward), min(K - s, M) under 1F1B
// (stage s runs K - s - 1 forwards before its first backward, then alternates).
//
// The predicted step simulates the schedule. Each stage runs its units (F(m): micro-batch m's
// forward, B(m): its backward) one at a time in the schedule's order; F(s, m) waits for
// F(s - 1, m) and the transfer of its activations, B(s, m) for B(s + 1, m) and the transfer of
// their gradients; when a stage's last backward is done it applies its updates. The step is the
// latest stage's finish.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/device_spec.h"
#include "graph/status.h"

namespace dflow {

enum class PipelineSchedule { kGPipe, k1F1B };

// "gpipe" or "1f1b".
const char* ScheduleName(PipelineSchedule schedule);
// InvalidArgument naming the text when it is neither.
Result<PipelineSchedule> ParseSchedule(std::string_view text);

// One unit of a stage's schedule: micro-batch `micro_batch`'s forward or backward.
struct PipelineUnit {
  bool backward = false;
  int micro_batch = 0;
};
// The order in which stage `stage` of `stages` runs its units. GPipe: F(0..M-1), B(0..M-1).
// 1F1B: w = min(K - stage - 1, M) forwards, then F(w), B(0), F(w + 1), B(1), ..., then the
// remaining backwards.
std::vector<PipelineUnit> StageOrder(PipelineSchedule schedule, int stage, int stages,
                                     int micro_batches);

// The chain of items (see above); every vector has one entry per item, the per-device ones an
// entry per device (the devices of PipelineDevices, in stage order).
struct StageChain {
  std::vector<std::vector<double>> forward_s;   // [item][device]: one micro-batch
  std::vector<std::vector<double>> backward_s;  // [item][device]: one micro-batch
  std::vector<std::vector<double>> update_s;    // [item][device]: once per step
  std::vector<double> persistent_bytes;
  std::vector<double> activation_bytes;  // per micro-batch in flight
  // crossing_bytes[i]: what one micro-batch sends over a cut after item i, each way
  // (activations forward, their gradients back).
  std::vector<double> crossing_bytes;
  // For messages: each item's node name.
  std::vector<std::string> names;

  int size() const { return static_cast<int>(forward_s.size()); }
};

// The devices of the stages, in order.
struct PipelineDevices {
  std::vector<std::string> names;    // for messages
  std::vector<double> memory_bytes;  // each device's limit
  std::vector<LinkSpec> links;       // links[s]: between stages s and s + 1
};

struct StagePlan {
  int micro_batches = 0;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  // K + 1 entries: stage s holds items [first_item[s], first_item[s + 1]).
  std::vector<int> first_item;
  // Per stage: seconds per micro-batch (forward, backward) and per step (updates).
  std::vector<double> forward_s, backward_s, update_s;
  std::vector<double> transfer_s;  // per boundary (K - 1): one micro-batch's crossing, one way
  std::vector<int> in_flight;      // per stage: micro-batches whose activations it holds at once
  std::vector<double> persistent_bytes, activation_bytes, peak_bytes;  // per stage
  double predicted_step_s = 0;
  // The step without the bubble: M micro-batches through the slowest stage, and its updates.
  double ideal_step_s = 0;

  int stages() const { return static_cast<int>(first_item.size()) - 1; }
  // Stage of item i.
  int StageOf(int item) const;
};

// Chooses the cut (cuts empty) or checks the one given (cuts: the K - 1 items where stages 1 to
// K - 1 begin, increasing): among the cuts whose every stage fits its device, the one whose
// slowest stage is fastest. Errors: InvalidArgument for fewer items than stages, M < 1, devices
// or cuts of the wrong count or order; ResourceExhausted when no cut fits (or the cut given does
// not), naming the stage, its device, its first and last node, and its bytes against the limit.
Result<StagePlan> PlanStages(const StageChain& chain, const PipelineDevices& devices,
                             int micro_batches, PipelineSchedule schedule,
                             const std::vector<int>& cuts = {});

// The simulated step of a plan's per-stage figures (fills nothing; see above).
double SimulatePipeline(const StagePlan& plan);

}  // namespace dflow
