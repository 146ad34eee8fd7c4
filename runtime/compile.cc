#include "runtime/compile.h"

#include "framework/device_factory.h"
#include "rewrite/channel_blocks.h"
#include "rewrite/fusion.h"
#include "rewrite/subgraph_fusion.h"

namespace dflow {
namespace {

// The rewritten copy of `graph` and `spec` remapped onto it, or null when nothing is rewritten:
// subgraph fusion, epilogue fusion, then the device's blocked channel layout. Fed, fetched and
// target nodes keep their names through every pass.
Result<std::shared_ptr<const Graph>> Rewrite(const Graph& graph, PlanSpec* spec,
                                             const std::string& device_type,
                                             const CompileOptions& options) {
  if (!options.fuse_epilogues) return std::shared_ptr<const Graph>();
  std::vector<std::string> keep;
  for (int f : spec->feeds) keep.push_back(graph.node(f).name());
  for (int t : spec->targets) keep.push_back(graph.node(t).name());
  for (const auto& e : spec->fetches) keep.push_back(graph.node(e.node).name());
  auto kept = [&keep](const Graph& g) {
    std::vector<int> ids;
    for (const auto& name : keep) ids.push_back(*g.FindNode(name));
    return ids;
  };
  auto has_kernel = [&device_type](const char* op) {
    return KernelRegistry::Global().Find(op, device_type) != nullptr;
  };
  ASSIGN_OR_RETURN(ops::SubgraphFused subgraphs,
                   ops::FuseSubgraphs(graph, kept(graph), has_kernel));
  ASSIGN_OR_RETURN(ops::FusedGraph fused,
                   ops::FuseEpilogues(subgraphs.graph, kept(subgraphs.graph), has_kernel));
  auto rewritten = std::make_shared<const Graph>(std::move(fused.graph));
  if (const int block = DeviceFactory::Global().ChannelBlock(device_type); block > 0) {
    ASSIGN_OR_RETURN(ops::BlockedGraph blocked,
                     ops::BlockChannels(*rewritten, kept(*rewritten), block));
    if (blocked.stats.convs > 0)
      rewritten = std::make_shared<const Graph>(std::move(blocked.graph));
  }
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
