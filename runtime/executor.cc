#include "runtime/executor.h"

#include <chrono>
#include <unordered_map>

#include "framework/progress.h"
#include "framework/spin_wait.h"

namespace dflow {
namespace {
// Nodes whose estimated work (FLOPs plus bytes moved) is below this run inline on the thread
// that made them ready: a hand-off to the pool costs more (design.md: pools lose below ~10 us).
constexpr double kInlineCostLimit = 256 * 1024;
// How long a run's thread polls a transport for its Recvs before it sleeps: as long as the
// transport's own thread polls after work (transport/ucx_progress.cc).
constexpr int64_t kPollNs = 500'000;
}  // namespace

struct ExecutionPlan::RunState {
  std::vector<int32_t> pending;
  std::vector<int32_t> uses;
  std::vector<Tensor> values;
  std::atomic<int> outstanding{0};  // Process calls started and not finished
  std::atomic<bool> aborted{false};
  // Bumped (under mu) with every inbox arrival and when the run is done: what the run's thread
  // polls for before it sleeps (runtime/spin_wait.h).
  std::atomic<uint64_t> events{0};
  Mutex mu;
  CondVar done_cv;
  bool done DFLOW_GUARDED_BY(mu) = false;
  Status status DFLOW_GUARDED_BY(mu);  // the first error

  // Output memory of the run: a recorder on a signature's first run, then its arena (kept
  // across runs of the same signature while no buffer outlives a run).
  std::string memory_key;
  AllocatorPtr<AllocationRecorder> recorder;
  AllocatorPtr<ArenaAllocator> arena;
  int64_t arena_planned = 0, arena_fallbacks = 0;  // counts at the run's start
  OutputMemory* output_memory = nullptr;

  // Asynchronous nodes that finished, with their status: the run's own thread completes them.
  std::vector<std::pair<int, Status>> inbox DFLOW_GUARDED_BY(mu);
  const ExecutionPlan::RunOptions* options = nullptr;
  // Profiling on a device that queues its work: times nodes by the device's clock.
  std::unique_ptr<NodeTimer> timer;

  // Clears the outcome of the previous run. REQUIRES: no other thread can reach the state (it
  // is between runs, owned by AcquireState). Not analysed: nothing is locked, as nothing needs
  // to be, and this runs on every step.
  void ResetOutcome() DFLOW_NO_THREAD_SAFETY_ANALYSIS {
    done = false;
    status = Status::OK();
  }
  void Fail(const Status& s) DFLOW_EXCLUDES(mu) {
    bool first = false;
    {
      MutexLock lock(mu);
      first = status.ok();
      if (first) status = s;
      aborted.store(true, std::memory_order_release);
    }
    if (first && options != nullptr && options->control != nullptr) options->control->Abort(s);
  }
  // True when no further node may start: this run failed, or its step was aborted.
  bool Stopping() {
    if (aborted.load(std::memory_order_relaxed)) return true;
    if (options != nullptr && options->control != nullptr && options->control->ShouldStop()) {
      aborted.store(true, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
};

ExecutionPlan::~ExecutionPlan() = default;

Result<std::unique_ptr<ExecutionPlan>> ExecutionPlan::Compile(std::shared_ptr<const Graph> graph,
                                                              const PlanSpec& spec,
                                                              Device* device) {
  ASSIGN_OR_RETURN(auto plan, Compile(*graph, spec, device));
  plan->owned_graph_ = std::move(graph);
  return plan;
}

Result<std::unique_ptr<ExecutionPlan>> ExecutionPlan::Compile(const Graph& graph,
                                                              const PlanSpec& spec,
                                                              Device* device) {
  if (!graph.validated()) return FailedPrecondition("the graph must be validated before compiling");
  const int n = graph.num_nodes();
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph, spec));

  auto plan = std::unique_ptr<ExecutionPlan>(new ExecutionPlan);
  plan->plan_memory_ = spec.plan_memory;
  plan->graph_ = &graph;
  plan->device_ = device;
  std::vector<int> plan_id(n, -1);
  for (int id : graph.topological_order()) {
    if (needed[id]) {
      plan_id[id] = static_cast<int>(plan->nodes_.size());
      plan->nodes_.push_back(PlanNode{});
      plan->nodes_.back().graph_id = id;
    }
  }

  // Value slots and kernels.
  int slots = 0;
  for (auto& pn : plan->nodes_) {
    const Node& node = graph.node(pn.graph_id);
    pn.output_base = slots;
    pn.num_outputs = node.num_outputs();
    slots += pn.num_outputs;
    const KernelFactory* factory = KernelRegistry::Global().Find(node.op(), device->type());
    if (factory == nullptr) {
      return NotFound("node '{}': op '{}' has no {} kernel (device {})", node.name(), node.op(),
                      device->type(), device->canonical_name());
    }
    KernelInit init{graph,
                    node,
                    device->canonical_name(),
                    device->allocator(),
                    device->variables(),
                    device->context()};
    auto kernel = (*factory)(init);
    if (!kernel.ok()) {
      return kernel.status().WithPrefix(
          fmt::format("node '{}' ({}) on {}: ", node.name(), node.op(), device->canonical_name()));
    }
    pn.kernel = std::move(kernel).value();
    const OpDef& def = *node.op_def();
    pn.is_async = pn.kernel->IsAsync();
    pn.shares_input = node.op() == "_Send";
    pn.allows_uninitialized_input = false;
    for (const auto& arg : def.inputs) pn.allows_uninitialized_input |= arg.may_be_uninitialized;
    if (def.constant_cost) {
      pn.expensive = false;
    } else {
      std::vector<DType> in_dtypes;
      std::vector<Shape> in_shapes;
      bool known = true;
      for (const auto& e : node.inputs()) {
        in_dtypes.push_back(graph.node(e.node).output_dtype(e.index));
        in_shapes.push_back(graph.node(e.node).output_shape(e.index));
        known &= in_shapes.back().fully_defined();
      }
      for (const auto& s : node.output_shapes()) known &= s.fully_defined();
      OpCost cost = def.cost_fn(
          CostContext{node, in_dtypes, in_shapes, node.output_dtypes(), node.output_shapes()});
      pn.expensive = !known || cost.flops + cost.bytes_read + cost.bytes_written > kInlineCostLimit;
    }
  }
  plan->num_values_ = slots;

  // Edges: input slots, successors, pending counts, use counts.
  std::vector<std::vector<int>> succ(plan->nodes_.size());
  plan->initial_uses_.assign(slots, 0);
  plan->initial_pending_.assign(plan->nodes_.size(), 0);
  for (size_t p = 0; p < plan->nodes_.size(); ++p) {
    auto& pn = plan->nodes_[p];
    const Node& node = graph.node(pn.graph_id);
    pn.input_begin = static_cast<int>(plan->input_slots_.size());
    pn.num_inputs = node.num_inputs();
    for (const auto& e : node.inputs()) {
      const auto& src = plan->nodes_[plan_id[e.node]];
      int slot = src.output_base + e.index;
      plan->input_slots_.push_back(slot);
      ++plan->initial_uses_[slot];
      succ[plan_id[e.node]].push_back(static_cast<int>(p));
    }
    for (int c : node.control_inputs()) succ[plan_id[c]].push_back(static_cast<int>(p));
    plan->initial_pending_[p] =
        static_cast<int32_t>(node.inputs().size() + node.control_inputs().size());
  }
  for (const auto& e : spec.fetches) {
    int slot = plan->nodes_[plan_id[e.node]].output_base + e.index;
    plan->fetch_slots_.push_back(slot);
    plan->fetch_nodes_.push_back(e.node);
    ++plan->initial_uses_[slot];  // kept to the end of the run
  }
  for (int f : spec.feeds) plan->feed_slots_.push_back(plan->nodes_[plan_id[f]].output_base);
  // Shortest branch first: of the nodes one completion makes ready, the one with the shortest
  // path to the end of the graph runs first (successors are pushed tallest first and popped
  // last in, first out). In a training step that runs each weight's gradient and update as soon
  // as it can, freeing the activations they read before the long input-gradient chain goes on;
  // it cut the CNN step's live memory by a fifth.
  std::vector<int> height(plan->nodes_.size(), 1);
  for (int p = static_cast<int>(plan->nodes_.size()) - 1; p >= 0; --p) {
    for (int q : succ[p]) height[p] = std::max(height[p], height[q] + 1);
  }
  for (auto& list : succ) {
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) { return height[a] > height[b]; });
  }
  for (size_t p = 0; p < plan->nodes_.size(); ++p) {
    auto& pn = plan->nodes_[p];
    pn.succ_begin = static_cast<int>(plan->successors_.size());
    pn.num_succ = static_cast<int>(succ[p].size());
    plan->successors_.insert(plan->successors_.end(), succ[p].begin(), succ[p].end());
    pn.dead_begin = static_cast<int>(plan->dead_outputs_.size());
    for (int o = 0; o < pn.num_outputs; ++o) {
      if (plan->initial_uses_[pn.output_base + o] == 0) {
        plan->dead_outputs_.push_back(pn.output_base + o);
      }
    }
    pn.num_dead = static_cast<int>(plan->dead_outputs_.size()) - pn.dead_begin;
    if (plan->initial_pending_[p] == 0) plan->roots_.push_back(static_cast<int>(p));
  }
  std::stable_sort(plan->roots_.begin(), plan->roots_.end(),
                   [&](int a, int b) { return height[a] > height[b]; });
  return plan;
}

std::unique_ptr<ExecutionPlan::RunState> ExecutionPlan::AcquireState() const {
  std::unique_ptr<RunState> s;
  {
    MutexLock lock(states_mu_);
    if (!free_states_.empty()) {
      s = std::move(free_states_.back());
      free_states_.pop_back();
    }
  }
  if (!s) {
    s = std::make_unique<RunState>();
    s->values.resize(num_values_);
  }
  s->pending = initial_pending_;
  s->uses = initial_uses_;
  s->outstanding.store(1, std::memory_order_relaxed);
  s->aborted.store(false, std::memory_order_relaxed);
  s->ResetOutcome();
  return s;
}

void ExecutionPlan::PrepareMemory(RunState* s, const std::vector<Tensor>& feeds) const {
  s->output_memory = nullptr;
  if (!plan_memory_) return;
  std::string key;
  // Dtypes and dims as raw bytes: this runs on every step, so no formatting.
  for (const auto& f : feeds) {
    key += static_cast<char>(f.dtype());
    key += static_cast<char>(f.shape().rank());
    for (int64_t d : f.shape().dims()) key.append(reinterpret_cast<const char*>(&d), sizeof d);
  }
  std::shared_ptr<const MemoryPattern> pattern;
  {
    MutexLock lock(memory_mu_);
    auto it = patterns_.find(key);
    if (it != patterns_.end()) {
      pattern = it->second;
    } else if (patterns_.size() >= kMaxPatterns) {
      return;  // enough signatures planned: the rest use the device allocator
    }
  }
  s->memory_key = key;
  if (pattern == nullptr) {
    s->recorder = MakeAllocator<AllocationRecorder>(device_->allocator());
    s->output_memory = s->recorder.get();
    return;
  }
  if (pattern->slots.empty()) return;
  if (s->arena == nullptr || &s->arena->pattern() != pattern.get()) {
    s->arena.reset(
        static_cast<ArenaAllocator*>(ArenaAllocator::Create(device_->allocator(), pattern)));
    if (s->arena == nullptr) return;  // no room for the arena: plain allocation
  }
  s->arena_planned = s->arena->planned();
  s->arena_fallbacks = s->arena->fallbacks();
  s->output_memory = s->arena.get();
}

void ExecutionPlan::FinishMemory(RunState* s, bool ok) const {
  if (s->recorder != nullptr) {
    auto pattern = std::make_shared<const MemoryPattern>(s->recorder->Finish());
    s->recorder.reset();
    if (ok) {
      MutexLock lock(memory_mu_);
      if (patterns_.emplace(s->memory_key, pattern).second) memory_stats_.patterns++;
    }
  } else if (s->arena != nullptr && s->output_memory == s->arena.get()) {
    MutexLock lock(memory_mu_);
    memory_stats_.arena_bytes = s->arena->pattern().arena_bytes;
    memory_stats_.unplanned_sum = s->arena->pattern().sum_bytes;
    memory_stats_.live_bound = s->arena->pattern().live_bytes;
    memory_stats_.planned += s->arena->planned() - s->arena_planned;
    memory_stats_.fallbacks += s->arena->fallbacks() - s->arena_fallbacks;
  }
  // A buffer still in the arena belongs to someone now: it keeps the arena alive, and the next
  // run gets a fresh one.
  if (s->arena != nullptr && s->arena->live() != 0) s->arena.reset();
  s->output_memory = nullptr;
}

PlanMemoryStats ExecutionPlan::memory_stats() const {
  MutexLock lock(memory_mu_);
  return memory_stats_;
}

void ExecutionPlan::ReleaseState(std::unique_ptr<RunState> s) const {
  MutexLock lock(states_mu_);  // Run cleared the values
  free_states_.push_back(std::move(s));
}

Status ExecutionPlan::Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
                          const RunOptions& options) const {
  if (feeds.size() != feed_slots_.size()) {
    return InvalidArgument("the plan takes {} feeds, got {}", feed_slots_.size(), feeds.size());
  }
  auto state = AcquireState();
  state->options = &options;
  if (options.node_seconds != nullptr) state->timer = device_->NewNodeTimer();
  for (size_t i = 0; i < feeds.size(); ++i) state->values[feed_slots_[i]] = feeds[i];
  PrepareMemory(state.get(), feeds);

  const int run_token = device_->EnterRun();
  StepControl* control = options.control;

  if (roots_.empty()) {
    MutexLock lock(state->mu);  // uncontended: no other thread has the state
    state->done = true;
  } else {
    // Roots are handed out like any newly ready node: the first stays on this thread, extra
    // expensive ones go to the pool.
    std::vector<int> local;
    for (int r : roots_) Ready(state.get(), r, local);
    Process(state.get(), std::move(local));
  }
  // Only `done`, set under the mutex by the last Process, ends the wait: a thread that saw
  // outstanding reach zero may still be about to take the mutex. Meanwhile this thread completes
  // the asynchronous nodes that finished; each completion is one Process call, matching the
  // outstanding count its start added.
  for (;;) {
    std::vector<std::pair<int, Status>> finished;
    bool expired = false;
    {
      MutexLock lock(state->mu);
      auto ready = [&]() DFLOW_REQUIRES(state->mu) { return state->done || !state->inbox.empty(); };
      if (!ready()) {
        // A Recv's tensor often arrives within microseconds: poll before sleeping. Where a
        // transport moves tensors between processes, this thread polls it (framework/progress.h)
        // and longer, as the transport's own thread would: the tensor then comes without a
        // wake-up of either thread.
        const uint64_t seen = state->events.load(std::memory_order_relaxed);
        lock.Unlock();
        {
          PollingScope polling;
          auto arrived = [&] { return state->events.load(std::memory_order_acquire) != seen; };
          if (polling.empty()) {
            SpinFor(arrived);
          } else {
            SpinFor(
                [&] {
                  polling.Poll();
                  return arrived();
                },
                kPollNs);
          }
        }
        lock.Lock();
      }
      if (control != nullptr && control->deadline()) {
        expired = !state->done_cv.WaitUntil(state->mu, *control->deadline(), ready);
      } else {
        state->done_cv.Wait(state->mu, ready);
      }
      if (!expired) {
        if (state->inbox.empty()) break;
        finished.swap(state->inbox);
      }
    }
    if (expired) {
      // Aborting fails the pending Recvs, whose completions then arrive in the inbox.
      control->Expire();
      state->aborted.store(true, std::memory_order_release);
      continue;
    }
    for (auto& [id, st] : finished) {
      std::vector<int> local;
      if (!st.ok()) {
        state->Fail(NodeError(nodes_[id], st));
      } else if (!state->aborted.load(std::memory_order_acquire)) {
        Complete(state.get(), id, local);
      }
      Process(state.get(), std::move(local));
    }
  }
  device_->LeaveRun(run_token);

  Status status;
  {
    MutexLock lock(state->mu);
    status = state->status;
  }
  if (state->timer != nullptr) {
    Status timed = state->timer->Collect(*options.node_seconds);
    if (status.ok()) status = timed;
    state->timer.reset();
  }
  // A partition that stopped only because its step was aborted elsewhere reports the step's
  // error, so no caller mistakes a cut-short run for a complete one.
  if (status.ok() && state->aborted.load(std::memory_order_acquire) && control != nullptr) {
    status = control->status();
  }
  if (status.ok()) {
    fetches->clear();
    fetches->reserve(fetch_slots_.size());
    for (int slot : fetch_slots_) fetches->push_back(state->values[slot]);
    // A variable fetched before anything assigned it has no value: say so rather than hand
    // back an empty tensor.
    for (size_t f = 0; f < fetches->size(); ++f) {
      const Node& src = graph_->node(fetch_nodes_[f]);
      if (!(*fetches)[f].valid() && src.role() == OpRole::kVariable) {
        status = FailedPrecondition(
            "fetch of variable '{}' on {}: it is uninitialised: run an Assign to it (its "
            "initializer) or restore a checkpoint first",
            src.name(), device_->canonical_name());
        fetches->clear();
        break;
      }
    }
  }
  for (auto& v : state->values) v = Tensor();  // after an error some values may remain
  FinishMemory(state.get(), status.ok());
  ReleaseState(std::move(state));
  return status;
}

void ExecutionPlan::Ready(RunState* s, int node, std::vector<int>& local) const {
  ThreadPool* pool = device_->inter_op_pool();
  if (pool != nullptr && nodes_[node].expensive && !local.empty()) {
    s->outstanding.fetch_add(1, std::memory_order_relaxed);
    pool->Schedule([this, s, node] { Process(s, {node}); });
  } else {
    local.push_back(node);
  }
}

Status ExecutionPlan::NodeError(const PlanNode& n, const Status& s) const {
  const Node& node = graph_->node(n.graph_id);
  return s.WithPrefix(
      fmt::format("node '{}' ({}) on {}: ", node.name(), node.op(), device_->canonical_name()));
}

Status ExecutionPlan::RunNode(RunState* s, const PlanNode& n) const {
  const int* slots = input_slots_.data() + n.input_begin;
  if (!n.allows_uninitialized_input) {
    for (int i = 0; i < n.num_inputs; ++i) {
      if (s->values[slots[i]].valid()) continue;
      const Node& node = graph_->node(n.graph_id);
      const Node& src = graph_->node(node.inputs()[i].node);
      if (src.role() == OpRole::kVariable) {
        return FailedPrecondition(
            "node '{}' ({}) on {}: input {} reads variable '{}', which is uninitialised: run an "
            "Assign to it first",
            node.name(), node.op(), device_->canonical_name(), i, src.name());
      }
      return Internal("node '{}' ({}): input {} from '{}' has no value", node.name(), node.op(), i,
                      src.name());
    }
  }
  KernelContext ctx(s->values.data(), slots, n.num_inputs, s->values.data() + n.output_base,
                    n.num_outputs, device_->allocator(), s->uses.data());
  ctx.set_device_context(device_->context());
  ctx.set_output_memory(s->output_memory, n.output_base);
  if (s->options != nullptr) ctx.set_step(&s->options->step);
  if (n.shares_input && s->recorder != nullptr) s->recorder->MarkShared(ctx.input(0));
  Status st = n.kernel->Compute(ctx);
  if (!st.ok()) return NodeError(n, st);
  return Status::OK();
}

void ExecutionPlan::Process(RunState* s, std::vector<int> local) const {
  while (!local.empty()) {
    int id = local.back();
    local.pop_back();
    if (s->Stopping()) continue;  // drop the rest of the run
    const PlanNode& n = nodes_[id];
    if (n.is_async) {
      StartAsync(s, id);
      continue;
    }
    Status st;
    if (s->options != nullptr &&
        (s->options->node_seconds != nullptr || s->options->node_spans != nullptr)) {
      if (s->timer != nullptr) s->timer->Begin(n.graph_id);
      const int64_t start = TraceClockNs();
      st = RunNode(s, n);
      const int64_t end = TraceClockNs();
      if (s->timer != nullptr) {
        s->timer->End(n.graph_id);
      } else if (s->options->node_seconds != nullptr) {
        (*s->options->node_seconds)[n.graph_id] += static_cast<double>(end - start) * 1e-9;
      }
      if (s->options->node_spans != nullptr) {
        (*s->options->node_spans)[n.graph_id] = {start, end, CurrentThreadIndex(), false};
      }
    } else {
      st = RunNode(s, n);
    }
    if (!st.ok()) {
      s->Fail(st);
      continue;
    }
    Complete(s, id, local);
  }
  if (s->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    MutexLock lock(s->mu);
    s->done = true;
    s->events.fetch_add(1, std::memory_order_release);
    s->done_cv.NotifyAll();
  }
}

void ExecutionPlan::StartAsync(RunState* s, int id) const {
  const PlanNode& n = nodes_[id];
  s->outstanding.fetch_add(1, std::memory_order_relaxed);
  auto ctx = std::make_shared<KernelContext>(s->values.data(), input_slots_.data() + n.input_begin,
                                             n.num_inputs, s->values.data() + n.output_base,
                                             n.num_outputs, device_->allocator(), s->uses.data());
  ctx->set_device_context(device_->context());
  ctx->set_output_memory(s->output_memory, n.output_base);
  if (s->options != nullptr) ctx->set_step(&s->options->step);
  NodeSpan* span = nullptr;
  if (s->options != nullptr && s->options->node_spans != nullptr) {
    span = &(*s->options->node_spans)[n.graph_id];
    *span = {TraceClockNs(), -1, CurrentThreadIndex(), true};
  }
  n.kernel->ComputeAsync(*ctx, [s, id, ctx, span](Status st) {
    if (span != nullptr) span->end_ns = TraceClockNs();
    MutexLock lock(s->mu);
    s->inbox.push_back({id, std::move(st)});
    s->events.fetch_add(1, std::memory_order_release);
    s->done_cv.NotifyAll();
  });
}

void ExecutionPlan::Complete(RunState* s, int id, std::vector<int>& local) const {
  const PlanNode& n = nodes_[id];
  {
    const int* slots = input_slots_.data() + n.input_begin;
    for (int i = 0; i < n.num_inputs; ++i) {
      if (std::atomic_ref<int32_t>(s->uses[slots[i]]).fetch_sub(1, std::memory_order_acq_rel) ==
          1) {
        s->values[slots[i]] = Tensor();
      }
    }
    for (int d = 0; d < n.num_dead; ++d) s->values[dead_outputs_[n.dead_begin + d]] = Tensor();
    const int* succ = successors_.data() + n.succ_begin;
    for (int i = 0; i < n.num_succ; ++i) {
      if (std::atomic_ref<int32_t>(s->pending[succ[i]]).fetch_sub(1, std::memory_order_acq_rel) ==
          1) {
        Ready(s, succ[i], local);
      }
    }
  }
}

}  // namespace dflow
