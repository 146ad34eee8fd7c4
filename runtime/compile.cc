#include "runtime/compile.h"

#include "framework/device_factory.h"
#include "rewrite/channel_blocks.h"
#include "rewrite/fusion.h"

namespace dflow {
namespace {

// The fused copy of `graph` and `spec` remapped onto it, or null when nothing is rewritten.
Result<std::shared_ptr<const Graph>> Rewrite(const Graph& graph, PlanSpec* spec,
                                             const std::string& device_type,
                                             const CompileOptions& options) {
  if (!options.fuse_epilogues) return std::shared_ptr<const Graph>();
  std::vector<int> keep = spec->feeds;
  keep.insert(keep.end(), spec->targets.begin(), spec->targets.end());
  for (const auto& e : spec->fetches) keep.push_back(e.node);
  ASSIGN_OR_RETURN(ops::FusedGraph fused,
                   ops::FuseEpilogues(graph, keep, [&device_type](const char* op) {
                     return KernelRegistry::Global().Find(op, device_type) != nullptr;
                   }));
  std::shared_ptr<const Graph> rewritten = std::make_shared<const Graph>(std::move(fused.graph));
  const int block = DeviceFactory::Global().ChannelBlock(device_type);
  if (block > 0) {
    // Fed, fetched and target nodes keep their names in the fused graph.
    std::vector<int> kept;
    for (int k : keep) kept.push_back(*rewritten->FindNode(graph.node(k).name()));
    ASSIGN_OR_RETURN(ops::BlockedGraph blocked, ops::BlockChannels(*rewritten, kept, block));
    if (blocked.stats.convs > 0) {
      rewritten = std::make_shared<const Graph>(std::move(blocked.graph));
    }
  }
  // Fed, fetched and target nodes keep their names; find their ids in the rewritten graph.
  auto remap = [&](int& id) { id = *rewritten->FindNode(graph.node(id).name()); };
  for (int& f : spec->feeds) remap(f);
  for (int& t : spec->targets) remap(t);
  for (auto& e : spec->fetches) remap(e.node);
  return rewritten;
}

}  // namespace

Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(std::shared_ptr<const Graph> graph,
                                                        const PlanSpec& spec, Device* device,
                                                        const CompileOptions& options) {
  PlanSpec local = spec;
  ASSIGN_OR_RETURN(auto rewritten, Rewrite(*graph, &local, device->type(), options));
  return ExecutionPlan::Compile(rewritten ? std::move(rewritten) : std::move(graph), local, device);
}

Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(const Graph& graph, const PlanSpec& spec,
                                                        Device* device,
                                                        const CompileOptions& options) {
  PlanSpec local = spec;
  ASSIGN_OR_RETURN(auto rewritten, Rewrite(graph, &local, device->type(), options));
  if (rewritten) return ExecutionPlan::Compile(std::move(rewritten), local, device);
  return ExecutionPlan::Compile(graph, local, device);
}

}  // namespace dflow
