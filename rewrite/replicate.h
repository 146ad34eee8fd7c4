// Data parallelism as a graph rewrite: a single-replica training graph (placeholders, a loss,
// an optimizer's Minimize, as the examples build them) becomes N replicas, one per device, each
// training on its share of every batch, their gradients averaged by ring all-reduces
// (rewrite/all_reduce.h) so every replica applies the same update to its own copy of the variables
// (mirrored variables, as Horovod and PyTorch DDP keep them).
//
// What the rewritten graph keeps, so that code written for the single replica runs it unchanged:
//   - feeds: a placeholder whose first dimension is unknown (a batch) is fed the whole batch
//     under its own name, on the first device, and split there into N equal parts, one per
//     replica (the batch must divide by N); other placeholders go whole to every replica;
//   - fetches: every node keeps its name in replica 0 ("replica1/...", "replica2/..." in the
//     others), except the `averaged` nodes (the loss), whose name gives the mean over replicas;
//   - targets: a NoOp or a node with effects that nothing reads (Minimize's NoOp, an initializer,
//     an update) becomes a NoOp over all replicas' copies, so running it runs them all;
//   - variables: replica 0's keep their names; the other replicas' copies name it in their
//     `mirror_of` attribute, so a checkpoint holds each variable once, as the single-replica
//     graph's does, and restoring it sets every copy (runtime/checkpoint_check.h): a checkpoint
//     of N replicas restores into any number. Every Assign of another replica takes replica 0's
//     value, so initializers give identical copies; `sync_target` copies replica 0's
//     variables to the others at any time.
//
// Gradients: every input named "grad" of a stateful op (ApplySGD, ApplyAdam, ...) is replaced
// by the mean over replicas. Gradients are packed into buckets in the order they are produced
// (the last layer's first): a small first bucket, then about 25 MB each (as PyTorch DDP), each
// bucket one all-reduce that starts as soon as its gradients exist, so communication overlaps
// the rest of the backward pass; a big gradient is all-reduced alone.
//
// With parameter servers the variables are kept once, on the servers, and the replicas' updates
// reach them synchronously (the mean of all gradients once per step, as above) or, in the
// asynchronous modes, each replica's own gradient as soon as it has it: every replica then has
// its own feeds, loss and train target (ReplicaName), runs its own steps, and TrainLoop runs the
// replicas at once (TrainLoopOptions::replicas), holding back a replica that gets too far ahead
// in the bounded-staleness mode.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "rewrite/all_reduce.h"

namespace dflow::ops {

struct ReplicateOptions {
  std::vector<std::string> devices;   // one replica on each (at least one)
  std::vector<std::string> averaged;  // nodes whose output 0 is averaged under their own name
  // Replicas that span several devices (a pipeline's stages, placer/pipeline.h, or a model split
  // by hand): in replica r, the single graph's nodes that request device replica_devices[0][k]
  // (compared as parsed device names) run on replica_devices[r][k], the others on devices[r]. One
  // list per replica, all of one length, no device twice; all-reduce only (no parameter servers).
  // Each gradient is all-reduced among the copies of the device that made it (a bucket holds one
  // device's gradients), a batch placeholder is split on its own device of replica 0, and
  // `hosts` stays one per replica.
  std::vector<std::vector<std::string>> replica_devices;
  int64_t first_bucket_bytes = 1 << 20;
  int64_t bucket_bytes = 25 << 20;
  int64_t chunk_bytes = 512 << 10;  // the all-reduces' chunks (AllReduceOptions)
  // A gradient of at least this many bytes is all-reduced on its own instead of packed into a
  // bucket: packing costs a copy in and one out, and a gradient this big amortizes its
  // messages (0: pack every gradient). The data-parallel MLP's step: 7.2 ms against 8.2 with
  // its two big gradients packed.
  int64_t own_all_reduce_bytes = 256 << 10;
  // Batch placeholders per replica (replica r's under ReplicaName(name, r)) instead of one split
  // on the first device: the caller feeds each replica its share of the batch, so each share
  // goes straight to its replica rather than through the first one (TrainLoopOptions::
  // feed_shards splits the batches). As in the asynchronous modes, which always do this.
  bool feed_shards = false;
  // Each device's host (AllReduceOptions::hosts; distributed::ReplicaHosts gives them from a
  // cluster spec): on several hosts, the all-reduces sum inside each host first.
  std::vector<std::string> hosts;
  // Parameter servers instead of all-reduce (synchronous): the variables, their optimizer state
  // and updates are kept once, spread over these devices by bytes (largest first, each to the
  // least loaded); every replica reads them there, and each update applies the mean of the
  // replicas' gradients, summed on the variable's device. Empty: all-reduce, mirrored variables.
  std::vector<std::string> parameter_servers;
  // With two or more servers, a variable whose group (the variable with the optimizer state its
  // update reads) is over this many bytes is split into blocks of rows of about this size
  // (rewrite/split_variables.h), each block with its state and its update a group of its own,
  // spread like whole ones; each replica joins the blocks it reads. Checkpoints then hold the
  // blocks ("NAME/part0", ...). 0: never split.
  int64_t max_variable_bytes = 16 << 20;
  // How the updates reach the parameter servers (only with parameter_servers):
  //   kSync: once per step, the mean of all replicas' gradients; one Run steps every replica.
  //   kAsync: each replica's update applies its own gradient when that is ready, in a step of
  //     the replica's own. Batch placeholders, the loss and the train target are per replica
  //     (replica 0 under the single graph's names, replica r under ReplicaName(name, r)), each
  //     fed a whole batch; `averaged` names replica 0's node (no mean over replicas is made).
  //     The optimizer's state (Adam's moments and step) is shared, as the variables are.
  //   kBoundedStaleness: the graph of kAsync; TrainLoop holds a replica that has done more than
  //     `staleness` steps more than the slowest (ReplicatedGraph::max_staleness).
  enum class Mode { kSync, kAsync, kBoundedStaleness };
  Mode mode = Mode::kSync;
  int staleness = 0;  // kBoundedStaleness: at least 0
  // kSync with backup workers (0 < b < replicas): every step applies the mean gradient of the
  // first N-b replicas done and drops the rest (stragglers no longer hold the step). Replicas
  // run their own steps, as in kAsync (their own feeds and losses), each leaving its gradients
  // in slots on the servers (ReplicatedGraph::replica_targets); the update (apply_target) reads
  // them weighted by weights_feed. TrainLoopOptions::backup_workers runs this.
  int backup_workers = 0;
};

struct ReplicatedGraph {
  std::shared_ptr<Graph> graph;
  std::string sync_target;  // copies replica 0's variables to the others (all-reduce only)
  int buckets = 0;          // all-reduces per step (all-reduce only)
  int replicas = 0;
  // The asynchronous modes: each replica's steps are run on their own, by name (ReplicaName).
  bool asynchronous = false;
  int max_staleness = -1;                      // kBoundedStaleness's bound for TrainLoop; -1: none
  std::map<std::string, int> split_variables;  // variable -> the row blocks it was split into
  // Backup workers: each replica's target (its gradients into its slots on the servers), the
  // update of the variables from the slots, the placeholder of the replicas' weights in it
  // (f32[N]), and the slots' initializer (run it once, after the variables' initializers).
  int backup_workers = 0;
  std::vector<std::string> replica_targets;
  std::string apply_target, weights_feed, init_target;
};

// The name of node (or tensor) `name` of the single-replica graph in replica `replica` of a
// replicated graph: `name` itself in replica 0, "replicaR/name" in the others (except the
// grouped and averaged names of the synchronous modes, which name all replicas).
std::string ReplicaName(const std::string& name, int replica);

// `single` may be validated already or not (a copy is then validated). Errors: InvalidArgument
// for no devices, a graph that fails validation, a gradient whose shape
// is not fully known (naming it), bad bucket sizes, an asynchronous mode without parameter
// servers, a negative staleness or backup workers outside synchronous parameter servers or not
// fewer than the replicas; NotFound for an `averaged` name the graph
// lacks.
Result<ReplicatedGraph> Replicate(const Graph& single, const ReplicateOptions& options);

}  // namespace dflow::ops
