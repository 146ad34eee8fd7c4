// LocalSession: the in-process Session. Its devices come from the DeviceFactory; a graph on
// several devices is placed once, at creation. Each run signature is compiled once into a
// PartitionedPlan (one device is one partition) and kept in one cache; every run takes the same
// path: check feeds, find or compile the step, run it with a step id of the session's and a
// LocalRendezvousFactory.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/device.h"
#include "graph/mutex.h"
#include "runtime/compile_cache.h"
#include "runtime/local_rendezvous.h"
#include "runtime/partitioned_plan.h"
#include "runtime/session.h"

namespace dflow {

class LocalSession final : public Session {
 public:
  static Result<std::unique_ptr<LocalSession>> Create(Graph graph,
                                                      const SessionOptions& options = {});
  static Result<std::unique_ptr<LocalSession>> Create(const Scope& scope,
                                                      const SessionOptions& options = {});
  ~LocalSession() override;

  using Session::Run;
  Result<std::vector<Tensor>> Run(const Feeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets,
                                  const RunOptions& options) override;
  Status SaveCheckpoint(const std::string& path) override;
  Result<std::map<std::string, Tensor>> SnapshotVariables() override;
  Status RestoreCheckpoint(const std::string& path) override;
  MeasuredCosts MeasuredNodeCosts() const override;
  const Graph& graph() const override { return graph_; }
  const DeviceSet& device_set() const override { return device_set_; }
  const PlacementReport& placement() const override { return placement_; }
  StepStats last_step_stats() const override DFLOW_EXCLUDES(mu_);
  int num_plans() const override;

  // For tests and tools.
  int num_devices() const { return static_cast<int>(devices_.size()); }
  Device& device(int i = 0) { return *devices_[i]; }
  // The compiled step of a signature (compiling it if needed).
  Result<const PartitionedPlan*> PlanFor(const Feeds& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets = {});
  // The graph the first partition of a signature runs, after rewrites: on one device, the
  // whole rewritten graph.
  Result<const Graph*> PlannedGraph(const Feeds& feeds, const std::vector<std::string>& fetches,
                                    const std::vector<std::string>& targets = {});

 private:
  LocalSession(Graph graph, const SessionOptions& options)
      : graph_(std::move(graph)), options_(options) {}
  Status Init();
  // Feeds checked, the compiled step of the signature.
  Result<const PartitionedPlan*> Compile(const Feeds& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets);
  VariableStore::Variable* FindVariable(int node, bool create);
  // Adds one profiled run of `graph` on a device of `type`. REQUIRES: mu_ held.
  void AddProfile(const std::string& type, const Graph& graph, const std::vector<double>& seconds)
      DFLOW_REQUIRES(mu_);

  const Graph graph_;  // validated once, at creation
  const SessionOptions options_;
  std::vector<std::unique_ptr<Device>> devices_;
  DeviceSet device_set_;
  PlacementReport placement_;
  LocalRendezvousFactory rendezvous_;
  std::atomic<int64_t> next_step_{1};

  CompileCache<PartitionedPlan> compiled_;
  mutable Mutex mu_;
  StepStats last_step_ DFLOW_GUARDED_BY(mu_);
  // Profiled runs: device type -> node -> (seconds, runs).
  CostProfile profile_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
