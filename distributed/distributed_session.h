// DistributedSession: a Session (runtime/session.h) whose devices belong to worker processes,
// on this host or others (tools/dflow_worker.cc). The master:
//
//   1. connects to every task of the cluster spec over its transport (UCX by default), naming
//      each (/job:worker/task:i),
//      and has the workers connect to each other;
//   2. learns each task's devices and figures, has each worker time its links to the others
//      (latency and bandwidth), and places the graph over all the devices with those links;
//   3. per run signature, prunes and partitions the graph, and ships each task its partitions in
//      the graph file form (Compile);
//   4. runs steps: each task gets the feeds its partitions need and returns its fetches; tensors
//      between tasks go straight from worker to worker. The first error of a step, on any task,
//      aborts the step on every task and is what Run returns.
//
// Variables live on the workers, so a session's state survives between steps as long as its
// workers do. SaveCheckpoint gathers them from the workers into one checkpoint file;
// RestoreCheckpoint checks every variable against the file, then sets them on the workers.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/cluster_spec.h"
#include "distributed/messages.h"
#include "distributed/task_names.h"
#include "graph/mutex.h"
#include "runtime/compile_cache.h"
#include "runtime/session.h"
#include "transport/transport.h"

namespace dflow::distributed {

struct DistributedOptions {
  ClusterSpec cluster;
  std::string token;  // the cluster token the workers were started with
  // The transport the workers listen on (transport::TransportRegistry): "ucx" where built.
  std::string transport = "ucx";
  std::chrono::milliseconds connect_timeout{10'000};
  // How long a request other than a step may take (compiling a partition, listing devices).
  std::chrono::milliseconds request_timeout{60'000};
  // The failure detector: a worker silent this long is lost (heartbeats go six times as often;
  // each worker's own is its --peer-timeout). Longer rides out a loaded network; shorter finds a
  // dead link sooner. A hung worker whose heartbeats go on is found by a step deadline instead
  // (TrainLoopOptions::step_timeout_seconds).
  std::chrono::milliseconds peer_timeout{1'500};
  // Checkpoints travel in requests of at most about this many bytes of values: small variables
  // together, a larger one in slices of its elements (each task copies a sliced variable once,
  // at its first slice, so steps in between cannot tear it). At least 1.
  int64_t checkpoint_chunk_bytes = int64_t{64} << 20;
  // The job this session's state belongs to on the workers (WorkerService): its devices,
  // variables and compiled graphs. Empty: a job of this session's own, which no other master
  // sees and which ends with the session. Named: masters of the same name share it, so a
  // restarted master finds the variables its predecessor left (until the workers'
  // --release-after). At most 256 bytes of printable ASCII.
  std::string job;
};

class DistributedSession final : public Session {
 public:
  // `options.devices`, `device`, `threads` and `device_specs` are ignored (the workers' devices
  // are the session's); the placer settings apply, and device_memory_bytes, when set, is the
  // memory the placer plans with on each device (at most what the worker has). Unavailable naming a
  // task that cannot be reached; PermissionDenied for a wrong token.
  static Result<std::unique_ptr<DistributedSession>> Create(Graph graph,
                                                            const SessionOptions& options,
                                                            const DistributedOptions& cluster);
  ~DistributedSession() override;

  using Session::Run;
  Result<std::vector<Tensor>> Run(const Feeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets,
                                  const RunOptions& options) override;
  Status SaveCheckpoint(const std::string& path) override;
  Result<std::map<std::string, Tensor>> SnapshotVariables() override;
  Status RestoreCheckpoint(const std::string& path) override;
  // From profiled steps (RunOptions::profile): each node's span on its worker, by device type.
  MeasuredCosts MeasuredNodeCosts() const override DFLOW_EXCLUDES(mu_);
  const Graph& graph() const override { return graph_; }
  const DeviceSet& device_set() const override { return set_; }
  const PlacementReport& placement() const override { return placement_; }
  StepStats last_step_stats() const override { return {}; }
  int num_plans() const override;

  // The tasks in the cluster's order.
  const std::vector<ClusterSpec::Task>& tasks() const { return tasks_; }
  // This master's own task name (unique: "/job:master/task:<random>"), which its workers see.
  std::string master_task() const { return transport_->task(); }
  // The session's names for its workers against the names they answer to.
  const TaskNames& task_names() const { return names_; }
  // The links between tasks as measured when the session was made (what the placer used).
  struct MeasuredLink {
    std::string from, to;  // tasks
    double latency_s = 0;
    double bandwidth = 0;  // bytes per second
  };
  const std::vector<MeasuredLink>& links() const { return links_; }

 private:
  DistributedSession() = default;
  // The graph's variables grouped by task (the workers' names); `mirrors`: with the replicas'
  // mirrored copies (runtime/checkpoint_check.h).
  std::map<std::string, VariablesRequest> VariablesByTask(bool mirrors) const;
  // A compiled signature: the tasks that run its partitions, and which of the step's feeds each
  // takes (indices into the step's feeds).
  struct TaskPart {
    std::string task;
    std::vector<int> feeds;
  };
  struct Signature {
    std::string id;
    int num_fetches = 0;
    std::vector<TaskPart> parts;
  };
  // A worker's error in this master's names, with its task (this master's name) named once.
  Status Failed(const std::string& task, const Status& s) const;
  static std::string MasterTask();
  // Compiles the signature on the workers; the caller checked the Run.
  Result<std::unique_ptr<Signature>> Compile(const Feeds& feeds,
                                             const std::vector<std::string>& fetches,
                                             const std::vector<std::string>& targets);

  Graph graph_;
  SessionOptions options_;
  DistributedOptions cluster_;
  std::vector<ClusterSpec::Task> tasks_;
  std::unique_ptr<transport::Transport> transport_;
  TaskNames names_;
  DeviceSet set_;       // the devices under this master's names: placement, reports
  DeviceSet wire_set_;  // the same devices under their workers' own names: partition graphs
  std::vector<MeasuredLink> links_;
  PlacementReport placement_;
  // Step ids are unique across masters, since a worker outlives them and drops what arrives
  // for steps it has finished: each session starts at a random multiple of 2^32.
  const int64_t first_step_ = FirstStepId();
  std::atomic<int64_t> next_step_{first_step_};
  static int64_t FirstStepId();
  std::atomic<int> next_signature_{0};
  CompileCache<Signature> signatures_;
  mutable Mutex mu_;
  CostProfile profile_ DFLOW_GUARDED_BY(mu_);  // of profiled runs, by device type
};

}  // namespace dflow::distributed
