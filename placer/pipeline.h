// Pipeline parallelism as a graph rewrite: a single-device training graph (batch placeholders, a
// loss that is a mean over the batch, an optimizer's Minimize, as the examples build them) is cut
// into K stages, one per device, and every step sends M micro-batches through them, so the
// devices work at once instead of waiting for each other (GPipe, 1F1B).
//
//   PipelineOptions o;
//   o.devices = {"cpu:0", "cpu:1"};
//   o.micro_batches = 8;
//   o.loss = "loss";
//   o.device_set = &set;  // the devices' speeds and memory limits, for choosing the stages
//   ASSIGN_OR_RETURN(PipelinedGraph p, Pipeline(graph, o));
//   // A session over o.devices runs p.graph; feeds, the loss and the train target keep their
//   // names; p.plan has the stages and the predicted step. The micro-batches' tensors have
//   // an unknown batch dimension: the session's placer should take it as batch / M
//   // (SessionOptions::placer.costs.unknown_dim).
//
// The stages: the forward pass's nodes (the loss's ancestors that depend on a batch) in
// topological order are cut into K runs, chosen by the cost model (placer/pipeline_stages.h:
// the slowest stage as fast as can be, every stage's variables, optimizer state, gradients and
// in-flight activations within its device's memory) or starting at the forward nodes named in
// `split_points`. A backward node goes with the forward node whose gradient it computes (by the
// name autodiff gives it, "gradients/NODE_grad/..."); others with the stage of their inputs.
//
// What the rewritten graph holds:
//   - feeds: a placeholder whose first dimension is unknown (a batch) is fed the whole batch under
//     its own name, on the first stage that reads it, and split there into M equal parts (the
//     batch must divide by M); other placeholders are fed once for all micro-batches;
//   - per micro-batch: every node that depends on a batch, copy m named "microbatchM/NAME", on
//     its stage's device; the loss and the `averaged` nodes keep their names for the mean over
//     micro-batches, the `gathered` nodes for their copies concatenated along dimension 0;
//   - once per step: the variables and everything else that does not depend on a batch, under
//     their names (an optimizer's updates, the train target, initializers); each update applies
//     the mean of the micro-batches' gradients, accumulated on the gradient's device as they come
//     (one running sum, so a stage holds one accumulated gradient and one micro-batch's). With a
//     loss that is a mean over the batch, the step is the unsplit step on the whole batch;
//   - the schedule: control edges order each stage's units (a micro-batch's forward, its
//     backward) as GPipe or 1F1B does (StageOrder), so a stage holds at most the in-flight
//     activations the plan counted. Fetching the loss alone runs the backward units too;
//   - for evaluation: each gathered node's forward pass once more, on the whole batch and
//     outside the schedule, as "evaluation/NAME" (EvaluationName): fetching it needs only the
//     batch placeholders it reads (no labels) and runs no backward unit. (Under 1F1B the
//     gathered node itself waits for backward units, which the schedule puts before later
//     forwards.)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "placer/cost_model.h"
#include "placer/device_set.h"
#include "placer/pipeline_stages.h"

namespace dflow {

struct PipelineOptions {
  std::vector<std::string> devices;  // stage s runs on devices[s]; at least one
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  std::string loss;                   // the loss: the forward pass ends there (required)
  std::vector<std::string> averaged;  // more nodes whose output 0 is averaged over micro-batches
  std::vector<std::string> gathered;  // nodes whose output 0 is concatenated over micro-batches
  // The forward nodes where stages 1 to K - 1 begin (K - 1 names, in topological order). Empty:
  // the stages are chosen.
  std::vector<std::string> split_points;
  // The devices' figures and memory limits; must hold every device of `devices`. Null: `devices`
  // as virtual CPU devices of DeviceSpec's defaults.
  const DeviceSet* device_set = nullptr;
  // The cost model's options; unknown_dim is the whole batch (a micro-batch is 1/M of it).
  CostOptions costs;
};

struct PipelinedGraph {
  std::shared_ptr<Graph> graph;
  std::vector<std::string> devices;  // stage s's device
  StagePlan plan;
  std::vector<std::string> items;  // the forward nodes, in order (plan.first_item indexes them)
  // Stage of each node of the single graph that is copied per micro-batch, and of each node
  // kept once that goes with a stage: variables, their updates and initializers, what only
  // those read. (Nodes of no stage, such as the train target, have no entry.)
  std::map<std::string, int> stage_of;
  // Each gathered node against its forward-only copy (EvaluationName), for inference.
  std::map<std::string, std::string> evaluation;

  // A few lines: the schedule, the predicted step, and per stage its device, nodes, times and
  // memory against the device's limit (`limits`: per stage; empty leaves the limits out).
  std::string Summary(const std::vector<double>& limits = {}) const;
};

// Node (or tensor) `name` of the single graph in micro-batch `m` of a pipelined graph.
std::string MicroBatchName(const std::string& name, int micro_batch);

// The forward-only copy of gathered node `name` in a pipelined graph: "evaluation/NAME".
std::string EvaluationName(const std::string& name);

// The node times of profiled steps of a pipelined graph (Session::MeasuredNodeCosts) as times
// of `single`'s nodes, for planning again with measured figures (PipelineOptions::costs): a
// node copied per micro-batch gets the mean of its copies' times, one that ran once its own. A
// node with no time (folded into another by fusion, so its work is counted where it ran; not
// needed by the steps profiled) gets 0.
MeasuredCosts PipelineNodeCosts(const MeasuredCosts& pipelined, const Graph& single);

// `single` may be validated already or not (a copy is then validated). Errors: InvalidArgument
// for no devices, M < 1, a graph that fails validation, a loss that does not depend on a batch,
// a split point that is not a forward node or out of order, fewer forward nodes than stages,
// a device the device set lacks, a gradient whose shape is not fully known; NotFound for a
// loss, averaged or gathered name the graph lacks; ResourceExhausted when no cut fits the
// devices' memory (naming the stage, its device and the bytes).
Result<PipelinedGraph> Pipeline(const Graph& single, const PipelineOptions& options);

}  // namespace dflow
