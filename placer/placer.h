// The placer: passes 3 (choice) and 4 (report) over passes 1 (constraints.h) and 2
// (cost_model.h).
//
// The cost placer is a list scheduler of the earliest-finish-time family. Nodes go in order of
// upward rank (HEFT: a node's cost plus the costliest path to the end of the graph). The first
// node of a colocation group to be scheduled picks, among the group's candidate devices with room
// for the group's variables, the one where it would finish earliest; the rest of the group
// follows it. A local search then moves whole groups while the predicted step time drops. Small
// problems (few groups and devices) are solved exactly by trying every assignment instead.
// Device memory is a hard limit. Groups go only where their variables fit, and the placement
// returned is the fastest of those considered (the list schedule, each local search's result,
// each single-device placement, the simple one) whose variables plus peak live activations, as
// the simulated step lays them out, fit every device. When no candidate has room for a group's
// variables, or no placement considered fits, Place returns ResourceExhausted naming the
// devices and the sizes.
//
// The simple placer is TensorFlow's behaviour: every group on the best single device it may use,
// else its first candidate. The cost placer also evaluates the simple placement and never
// returns a worse prediction.
#pragma once

#include <string>
#include <vector>

#include "placer/coarsen.h"
#include "placer/constraints.h"
#include "placer/cost_model.h"

namespace dflow {

struct PlacerOptions {
  enum class Kind { kCost, kSimple };
  Kind kind = Kind::kCost;
  ConstraintOptions constraints;
  CostOptions costs;
  // Merge chains of cheap single-consumer nodes into groups first (coarsen.h).
  bool merge_chains = true;
  // Graphs whose groups have at most this many assignments to their candidates are placed by
  // trying them all (a 10-node graph on 2 devices has at most 1,024). 0 turns this exact search
  // off, leaving the list schedule and local search, as on graphs too large to enumerate (the
  // placement-quality test measures them alone this way).
  double exhaustive_max_placements = 4096;
  // Local search is skipped above this many nodes (it re-simulates the step per move).
  int local_search_max_nodes = 2000;
  // Fill PlacementReport::log with one line per node.
  bool log_placement = false;
};

struct PlacementReport {
  std::vector<int> device_of;            // node id -> device index
  double predicted_step_s = 0;           // of this placement
  double simple_step_s = 0;              // of the simple placement, for comparison
  std::vector<double> persistent_bytes;  // per device: variables and constants
  std::vector<double> peak_bytes;        // per device: those plus peak live activations
  int cross_edges = 0;                   // Send/Recv pairs: one per (tensor, other device)
  double cross_bytes = 0;
  int groups = 0;                // groups placed: colocation groups after chain merging
  int chain_merges = 0;          // merges made by chain merging
  std::vector<std::string> log;  // soft-placement notes, then (on request) node lines

  // A few lines: predicted step time against the simple placer, per-device nodes and memory,
  // cross-device edges and bytes.
  std::string Summary(const DeviceSet& devices) const;
};

// REQUIRES: graph validated.
Result<PlacementReport> Place(const Graph& graph, const DeviceSet& devices,
                              const PlacerOptions& options = {});

// Exposed for tests: the scheduling order (nodes by decreasing upward rank, a topological order)
// and the predicted step time of a placement under the cost model, simulated in that order
// with each device running one node at a time.
std::vector<int> ScheduleOrder(const Graph& graph, const CostModel& costs);
double PredictStep(const Graph& graph, const CostModel& costs, const std::vector<int>& order,
                   const std::vector<int>& device_of);

}  // namespace dflow
