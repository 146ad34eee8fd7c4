// dflow-run: runs a graph file (.dfg, or its JSON form) from the command line.
//
//   dflow-run model.dfg --feed x=x.npy --fetch y=y.npy --fetch loss --target train --steps 100
//
// Feeds are NumPy .npy files (int64 values are converted for an int32 placeholder when they fit);
// a fetch with a file is written there, one without is printed (dtype, shape, values; long ones
// elided). With --steps N the run repeats N times with a progress line and per-step time
// statistics beside the step time the placer predicted. --save-costs writes each node's measured
// time, for --cost-file on the next run (the placer then plans with this machine's figures,
// contention between devices included). --trace writes a Chrome trace / Perfetto timeline
// of every step (runtime/step_trace.h). Output files are checked before the first step, and
// with --checkpoint-every N the variables are saved every N steps as well as at the end.
// --micro-batches M pipelines a training graph (placer/pipeline.h): stages on the devices
// (--stages K: cpu:0 to cpu:K-1; on a cluster, a worker each), the fed batch split into M
// micro-batches, 1F1B or GPipe (--schedule); --loss names the loss (default "loss"), --gather
// the per-example nodes to fetch whole. The stages and the predicted step go to stderr.
// --save-graph writes the graph (an ONNX model as imported; --trainable: its initializers as
// variables) to a .dfg file and runs nothing; --export-onnx writes what the fetches depend on,
// with the variables' values after the steps, as an ONNX model.
// SIGINT or SIGTERM lets the step in flight finish, then writes everything asked for (statistics,
// fetches, checkpoint, costs, trace) for the steps done and exits 128 + the signal's number; a
// second signal ends the program at once. Exit codes: 0 success, 1 an error while loading or
// running, 2 a usage error, 130/143 interrupted. Errors go to stderr as one line
// "error: <Code>: <message>".
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "dflow/version.h"
#include "ops/register.h"
#include "runtime/session.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "tools/cli.h"
#include "tools/device_list.h"
#include "tools/graph_input.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "distributed/rendezvous.h"
#endif
#include "tools/feed_dtype.h"
#if DFLOW_HAS_ONNX
#include "onnx/onnx_export.h"
#endif
#include "runtime/session_devices.h"
#include "tools/pipeline_flags.h"
#include "tools/placement_flags.h"

using namespace dflow;

namespace {

constexpr int kUsageError = tools::kUsageError;
constexpr int kRunError = 1;

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return code;
}

// "NAME=FILE" into its halves; FILE may be empty when `file_optional`.
Result<std::pair<std::string, std::string>> SplitAssignment(const std::string& arg,
                                                            const char* flag, bool file_optional) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos && file_optional) return std::make_pair(arg, std::string());
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    return InvalidArgument("{} '{}': expected NAME=FILE.npy", flag, arg);
  }
  return std::make_pair(arg.substr(0, eq), arg.substr(eq + 1));
}

// At most `limit` values, then "...".
template <typename T>
std::string Values(const Tensor& t, size_t limit) {
  std::string s;
  auto flat = t.flat<T>();
  for (size_t i = 0; i < flat.size() && i < limit; ++i) {
    if (i) s += ", ";
    if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>) {
      s += std::to_string(static_cast<int>(flat[i]));
    } else {
      s += fmt::format("{}", flat[i]);
    }
  }
  if (flat.size() > limit) s += fmt::format(", ... ({} values)", flat.size());
  return s;
}

std::string Describe(const Tensor& t) {
  constexpr size_t kLimit = 20;
  std::string values;
  switch (t.dtype()) {
    case DType::kF32:
      values = Values<float>(t, kLimit);
      break;
    case DType::kF64:
      values = Values<double>(t, kLimit);
      break;
    case DType::kI32:
      values = Values<int32_t>(t, kLimit);
      break;
    case DType::kI64:
      values = Values<int64_t>(t, kLimit);
      break;
    case DType::kU8:
      values = Values<uint8_t>(t, kLimit);
      break;
    case DType::kBool:
      values = Values<bool>(t, kLimit);
      break;
    default:
      values = "(not printed; use --fetch NAME=FILE.npy)";
  }
  return fmt::format("{}{} [{}]", DTypeName(t.dtype()), t.shape(), values);
}

// The first SIGINT or SIGTERM received (0: none). The handler only stores it and writes a fixed
// line (both async-signal-safe); the step loop looks at it between steps.
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    constexpr char kLine[] =
        "\ndflow-run: interrupted; finishing the step in flight, then writing what was asked "
        "(a second Ctrl-C or SIGTERM ends it at once)\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
    return;
  }
  constexpr char kLine[] = "\ndflow-run: second signal: ending now, nothing written\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
  ::_exit(128 + sig);
}

void HandleInterrupts() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Runs a dflow graph file (.dfg, or its JSON form)");
  tools::Configure(app, "dflow-run");
  std::string graph_path, cost_file, save_costs, restore, save, trace_path, save_graph, export_onnx;
  bool trainable = false;
  tools::PlacementFlags placement;
  std::vector<std::string> feed_args, fetch_args, targets;
  int steps = 1, checkpoint_every = 0;
  bool log_placement = false;
  app.add_option("graph", graph_path, "The graph file (.dfg, its JSON form, or an ONNX model)")
      ->required();
  app.add_option("--feed", feed_args,
                 "NAME=FILE.npy: feed placeholder NAME from a .npy file (int64 values "
                 "for an int32 placeholder are converted when each fits)");
  app.add_option("--fetch", fetch_args,
                 "NAME[=FILE.npy]: fetch tensor NAME (\"node\" or \"node:1\"); written to the "
                 "file, or printed");
  app.add_option("--target", targets, "NAME: run node NAME for its effects (an update, an init)");
  placement.AddTo(app,
                  "cpu:0,cpu:1,gpu:0,...: place the graph on these devices of this process, "
                  "CPUs cpu:0 .. cpu:N-1 (made up: a thread pool each) and those of every other "
                  "type there is (gpu:0), in any order and spelling (CPU:1, "
                  "/job:localhost/task:0/device:CPU:1). Default: cpu:0 up to the highest CPU a "
                  "node of the graph requests (a graph pinned to cpu:3 gets cpu:0 .. cpu:3) and "
                  "the other devices nodes request, or one CPU when none is requested");
  tools::PipelineFlags pipeline;
  pipeline.AddTo(app, /*graph_names=*/true, "--devices");
  app.add_option("--cost-file", cost_file, "Measured per-node seconds (JSON) for the placer");
  app.add_option("--save-costs", save_costs,
                 "Time every node in the steps after the first and write the means to this JSON "
                 "file: a --cost-file for the next run, so the placer plans with what this "
                 "machine measured");
  app.add_option("--steps", steps, "Run the step N times and print time statistics")
      ->check(tools::AtLeast(1));
  app.add_option("--restore", restore, "Restore variables from this checkpoint first");
  app.add_option("--save", save,
                 "Save variables to this checkpoint after the last step (also when interrupted)");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "With --save: also save the variables there every N steps (0: only at the end)")
      ->check(tools::AtLeast(0));
  app.add_option("--trace", trace_path,
                 "Write a timeline of the steps to this JSON file (Chrome trace format: open it "
                 "in ui.perfetto.dev or chrome://tracing): a track per device, a slice per node, "
                 "arrows from each Send to its Recv");
  app.add_flag("--log-placement", log_placement, "Print where every node runs");
  app.add_flag("--trainable", trainable,
               "An ONNX model's float initializers become variables (run --target init first), "
               "so a loss added to the graph can train them");
  app.add_option("--save-graph", save_graph,
                 "Write the graph (an ONNX model as imported) to FILE.dfg (or .json) and exit "
                 "without running it");
  app.add_option("--export-onnx", export_onnx,
                 "After the steps, write what the --fetch tensors depend on, with the variables' "
                 "values then, to FILE as an ONNX model (inputs: the placeholders; outputs: the "
                 "fetches)");
  std::string cluster_file, token_file;
  app.add_option("--cluster", cluster_file,
                 "Run across the dflow-workers of this cluster spec (JSON: {\"worker\": "
                 "[\"HOST:PORT\", ...]}); their devices replace --devices");
  std::string rendezvous;
  int expect_workers = 0;
  double rendezvous_timeout = 120;
  app.add_option("--rendezvous", rendezvous,
                 "Listen at HOST:PORT for dflow-workers started with --master (by srun, mpirun, "
                 "...) and run across them, ordered by rank; their devices replace --devices")
      ->excludes("--cluster");
  app.add_option("--workers", expect_workers,
                 "With --rendezvous: how many workers to wait for (default: the world size their "
                 "launcher gives them)")
      ->check(tools::AtLeast(1));
  app.add_option("--rendezvous-timeout", rendezvous_timeout,
                 "With --rendezvous: seconds to wait for all the workers (default 120)")
      ->check(tools::NonNegative());
  app.add_option("--token-file", token_file, "The cluster token (with --cluster or --rendezvous)");
  std::string job;
  app.add_option("--job", job,
                 "With --cluster or --rendezvous: the job this run's variables and graphs belong "
                 "to on the workers; a later run of the same --job finds the variables this one "
                 "left (default: a job of its own, ended with the run)");
  if (auto code = tools::Parse(app, argc, argv)) return *code;
  if (Status s = placement.Check(); !s.ok()) return Fail(s, kUsageError);
  if (Status s = pipeline.Check(app); !s.ok()) return Fail(s, kUsageError);
  const bool on_cluster = !cluster_file.empty() || !rendezvous.empty();
  if (!job.empty() && !on_cluster) {
    return Fail(InvalidArgument("--job goes with --cluster or --rendezvous"), kUsageError);
  }
  if (on_cluster != !token_file.empty()) {
    return Fail(InvalidArgument("--token-file goes with --cluster or --rendezvous"), kUsageError);
  }
  if (on_cluster && !placement.devices.empty()) {
    return Fail(InvalidArgument("--devices and --cluster or --rendezvous: the cluster's workers "
                                "are the devices"),
                kUsageError);
  }

  std::vector<std::pair<std::string, std::string>> feeds_from, fetches_to;
  for (const auto& f : feed_args) {
    auto kv = SplitAssignment(f, "--feed", false);
    if (!kv.ok()) return Fail(kv.status(), kUsageError);
    feeds_from.push_back(*kv);
  }
  for (const auto& f : fetch_args) {
    auto kv = SplitAssignment(f, "--fetch", true);
    if (!kv.ok()) return Fail(kv.status(), kUsageError);
    fetches_to.push_back(*kv);
  }
  if (!save_graph.empty()) {
    if (!fetches_to.empty() || !targets.empty() || !export_onnx.empty()) {
      return Fail(InvalidArgument("--save-graph writes the graph and runs nothing: leave out "
                                  "--fetch, --target and --export-onnx"),
                  kUsageError);
    }
    ops::RegisterStandardOps();
    auto graph = tools::LoadGraphFile(graph_path, nullptr, trainable);
    if (!graph.ok()) return Fail(graph.status(), kRunError);
    if (Status s = serialization::SaveGraph(*graph, save_graph); !s.ok()) {
      return Fail(s.WithPrefix("--save-graph: "), kRunError);
    }
    std::printf("wrote %s (%d nodes)\n", save_graph.c_str(), graph->num_nodes());
    return 0;
  }
  if (!export_onnx.empty() && fetches_to.empty()) {
    return Fail(InvalidArgument("--export-onnx needs --fetch: the tensors the model computes"),
                kUsageError);
  }
#if !DFLOW_HAS_ONNX
  if (!export_onnx.empty()) {
    return Fail(Unimplemented("--export-onnx: this dflow-run was built without ONNX (libonnx-dev)"),
                kUsageError);
  }
#endif
  if (fetches_to.empty() && targets.empty()) {
    return Fail(InvalidArgument("nothing to run: give at least one --fetch or --target"),
                kUsageError);
  }
  if (checkpoint_every > 0 && save.empty()) {
    return Fail(InvalidArgument("--checkpoint-every needs --save FILE: where to write"),
                kUsageError);
  }
  // Every file the run will write can be written: found now, not after the steps.
  {
    std::vector<std::pair<std::string, std::string>> outputs = {{"--save", save},
                                                                {"--trace", trace_path},
                                                                {"--save-costs", save_costs},
                                                                {"--export-onnx", export_onnx}};
    for (const auto& [name, file] : fetches_to) outputs.emplace_back("--fetch " + name, file);
    for (const auto& [flag, file] : outputs) {
      if (file.empty()) continue;
      if (Status s = serialization::CheckWritable(file); !s.ok()) {
        return Fail(s.WithPrefix(flag + ": "), kRunError);
      }
    }
  }
  HandleInterrupts();

  std::vector<StepTrace> traces;
  // The trace of the steps so far, also when a step fails: it shows what ran before the error.
  auto write_trace = [&]() -> Status {
    if (trace_path.empty()) return Status::OK();
    Status s = WriteChromeTrace(traces, trace_path);
    return s.ok() ? s : s.WithPrefix("--trace: ");
  };

  ops::RegisterStandardOps();
  auto graph = tools::LoadGraphFile(graph_path, nullptr, trainable);
  if (!graph.ok()) return Fail(graph.status(), kRunError);
  SessionOptions options;
  placement.ApplyTo(options);
  if (placement.devices.empty() && !on_cluster) {
    // Without --devices, the devices the graph's nodes request (a graph saved with devices
    // pinned runs as it was built); one CPU when none are requested. The placer's flags need
    // a placed session, also on one device.
    auto requested = tools::DevicesRequestedBy(*graph);
    if (!requested.ok()) return Fail(requested.status(), kRunError);
    if (requested->size() > 1 || placement.tunes_placer()) {
      options.devices = *requested;
      std::fprintf(stderr,
                   "devices (cpu:0 up to the highest a node requests; --devices overrides): %s\n",
                   tools::JoinDevices(*requested).c_str());
    }
  }
  options.cost_file = cost_file;
  options.log_placement = log_placement;
  Session::Feeds feeds;
  for (const auto& [name, file] : feeds_from) {
    auto t = serialization::ReadNpy(file);
    if (!t.ok()) return Fail(t.status().WithPrefix("--feed " + name + ": "), kRunError);
    auto matched = tools::MatchPlaceholderDType(*graph, name, file, std::move(*t));
    if (!matched.ok()) return Fail(matched.status(), kRunError);
    feeds.emplace_back(name, std::move(*matched));
  }
  // --micro-batches: the graph cut into stages over `devices`; the batch to split (and to plan
  // for) is the first dimension of the first fed placeholder whose first dimension is unknown.
  auto pipelined = [&](const std::vector<std::string>& devices, const DeviceSet& set) -> Status {
    if (!graph->validated()) RETURN_IF_ERROR(graph->Validate());
    int64_t batch = 0;
    for (const auto& [name, tensor] : feeds) {
      auto id = graph->FindNode(name);
      const Shape& shape = graph->node(*id).output_shape(0);
      if (shape.rank() > 0 && shape.dims()[0] < 0 && tensor.shape().rank() > 0) {
        batch = tensor.shape().dims()[0];
        break;
      }
    }
    if (batch == 0) {
      return InvalidArgument(
          "--micro-batches: no batch to split; feed a placeholder whose first dimension is "
          "unknown");
    }
    ASSIGN_OR_RETURN(
        PipelinedGraph piped,
        pipeline.Apply(*graph, devices, set, batch, static_cast<double>(placement.memory_bytes),
                       stderr, &options.placer.costs.unknown_dim));
    *graph = *piped.graph;
    return Status::OK();
  };
  Result<std::unique_ptr<Session>> session = Internal("no session");
#ifdef DFLOW_WITH_DISTRIBUTED
  std::unique_ptr<distributed::RendezvousServer> workers_joined;  // the workers stay while it does
#endif
  if (!on_cluster) {
    if (pipeline.on()) {
      options.devices = pipeline.LocalDevices(options.devices);
      if (options.devices.empty()) {
        return Fail(InvalidArgument("--micro-batches needs the stages' devices: --devices or "
                                    "--stages"),
                    kUsageError);
      }
      auto devices = CreateSessionDevices(options);
      if (!devices.ok()) return Fail(devices.status(), kRunError);
      if (Status s = pipelined(options.devices, devices->set); !s.ok()) return Fail(s, kRunError);
    }
    session = Session::Create(std::move(*graph), options);
  } else {
#ifdef DFLOW_WITH_DISTRIBUTED
    distributed::DistributedOptions cluster;
    auto token = distributed::ReadTokenFile(token_file);
    if (!token.ok()) return Fail(token.status().WithPrefix("--token-file: "), kRunError);
    cluster.token = *token;
    cluster.job = job;
    if (!rendezvous.empty()) {
      distributed::RendezvousOptions r;
      r.listen = rendezvous;
      r.token = *token;
      r.expected_workers = expect_workers;
      r.timeout = std::chrono::milliseconds(static_cast<int64_t>(rendezvous_timeout * 1000));
      auto spec = distributed::GatherWorkers(std::move(r), &workers_joined);
      if (!spec.ok()) return Fail(spec.status(), kRunError);
      cluster.cluster = *spec;
    } else {
      auto spec = distributed::ClusterSpec::Load(cluster_file);
      if (!spec.ok()) return Fail(spec.status(), kRunError);
      cluster.cluster = *spec;
    }
    if (pipeline.on()) {
      // A stage on each worker's cpu:0, planned with this host's CPU at one thread a worker.
      DeviceSet set;
      auto workers = cluster.cluster.jobs.find("worker");
      auto devices = pipeline.WorkerDevices(
          workers == cluster.cluster.jobs.end() ? 0 : static_cast<int>(workers->second.size()), 1,
          placement.fixed_costs, static_cast<double>(placement.memory_bytes), &set);
      if (!devices.ok()) return Fail(devices.status(), kRunError);
      if (Status s = pipelined(*devices, set); !s.ok()) return Fail(s, kRunError);
    }
    auto made = distributed::DistributedSession::Create(std::move(*graph), options, cluster);
    if (made.ok()) {
      for (const auto& l : (*made)->links()) {
        std::fprintf(stderr, "link %s -> %s: %.1f us, %.0f MB/s (measured)\n", l.from.c_str(),
                     l.to.c_str(), l.latency_s * 1e6, l.bandwidth / 1e6);
      }
      session = std::unique_ptr<Session>(std::move(made).value());
    } else {
      session = made.status();
    }
#else
    return Fail(Unimplemented("--cluster and --rendezvous: this dflow-run was built without UCX"),
                kRunError);
#endif
  }
  if (!session.ok()) return Fail(session.status(), kRunError);
  if ((!options.devices.empty() || on_cluster) && !log_placement) {
    std::fprintf(stderr, "%s\n", tools::PlacementSummary(**session).c_str());
  }
  if (!restore.empty()) {
    if (Status s = (*session)->RestoreCheckpoint(restore); !s.ok()) return Fail(s, kRunError);
  }
  std::vector<std::string> fetch_names;
  for (const auto& [name, file] : fetches_to) fetch_names.push_back(name);

  const bool tty = isatty(STDERR_FILENO);
  std::vector<double> step_ms;
  std::vector<Tensor> out;
  int done = 0;  // steps finished
  for (int step = 1; step <= steps && g_signal.load() == 0; ++step) {
    auto start = std::chrono::steady_clock::now();
    Session::RunOptions run_options;
    if (!trace_path.empty()) run_options.trace = &traces.emplace_back();
    // The first step compiles and plans memory: not a node time worth keeping.
    run_options.profile = !save_costs.empty() && (step > 1 || steps == 1);
    auto result = (*session)->Run(feeds, fetch_names, targets, run_options);
    if (!result.ok()) {
      if (Status s = write_trace(); !s.ok()) return Fail(s, kRunError);
      if (steps > 1) return Fail(result.status().WithPrefix(fmt::format("step {}: ", step)), 1);
      return Fail(result.status(), kRunError);
    }
    out = std::move(*result);
    done = step;
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (steps > 1 && (tty || step == steps || step % std::max(1, steps / 4) == 0)) {
      const int width = 30, bar = static_cast<int>(int64_t{width} * step / steps);
      std::fprintf(stderr, "%s[%s%s] %d/%d steps%s", tty ? "\r" : "", std::string(bar, '=').c_str(),
                   std::string(width - bar, ' ').c_str(), step, steps, tty ? "" : "\n");
    }
    if (checkpoint_every > 0 && step % checkpoint_every == 0 && step < steps) {
      if (Status s = (*session)->SaveCheckpoint(save); !s.ok()) {
        return Fail(s.WithPrefix(fmt::format("--checkpoint-every: after step {}: ", step)),
                    kRunError);
      }
      if (!tty) std::fprintf(stderr, "checkpoint after step %d: %s\n", step, save.c_str());
    }
  }
  const int interrupted = g_signal.load();
  if (steps > 1 && done > 0) {
    if (tty) std::fprintf(stderr, "\n");
    // One device and no --devices: nothing was placed, so there is no prediction to show.
    const double predicted_ms = (*session)->placement().predicted_step_s * 1e3;
    const std::string predicted = predicted_ms > 0
                                      ? fmt::format("placer predicted {:.3f} ms", predicted_ms)
                                      : std::string("one device, no placement to predict");
    std::printf("%d steps: median %.3f ms, p90 %.3f ms, min %.3f ms (%s)\n", done,
                Percentile(step_ms, 0.5), Percentile(step_ms, 0.9), Percentile(step_ms, 0.0),
                predicted.c_str());
  }
  // Interrupted before a step finished: nothing new to write.
  const bool write = interrupted == 0 || done > 0;
  if (!save_costs.empty() && write) {
    if (Status s = (*session)->MeasuredNodeCosts().Save(save_costs); !s.ok()) {
      return Fail(s.WithPrefix("--save-costs: "), kRunError);
    }
  }
  for (size_t i = 0; i < fetches_to.size() && done > 0; ++i) {
    const auto& [name, file] = fetches_to[i];
    if (file.empty()) {
      std::printf("%s: %s\n", name.c_str(), Describe(out[i]).c_str());
    } else if (Status s = serialization::WriteNpy(out[i], file); !s.ok()) {
      return Fail(s.WithPrefix("--fetch " + name + ": "), kRunError);
    }
  }
  if (!save.empty() && write) {
    if (Status s = (*session)->SaveCheckpoint(save); !s.ok()) return Fail(s, kRunError);
  }
#if DFLOW_HAS_ONNX
  if (!export_onnx.empty() && write) {
    if (Status s = onnx::ExportModel(**session, fetch_names, export_onnx); !s.ok()) {
      return Fail(s.WithPrefix("--export-onnx: "), kRunError);
    }
  }
#endif
  if (Status s = write_trace(); !s.ok()) return Fail(s, kRunError);
  if (interrupted != 0) {
    std::vector<std::string> wrote;
    if (write && !fetches_to.empty()) wrote.push_back("the fetches of the last step");
    if (write && !save.empty()) wrote.push_back("checkpoint " + save);
    if (write && !save_costs.empty()) wrote.push_back("costs " + save_costs);
    if (write && !export_onnx.empty()) wrote.push_back("ONNX model " + export_onnx);
    if (!trace_path.empty()) wrote.push_back("trace " + trace_path);
    std::string what;
    for (size_t i = 0; i < wrote.size(); ++i) what += (i ? ", " : "; wrote ") + wrote[i];
    std::fprintf(stderr, "error: Cancelled: interrupted by %s after %d of %d steps%s\n",
                 interrupted == SIGINT ? "SIGINT" : "SIGTERM", done, steps, what.c_str());
    return 128 + interrupted;
  }
  return 0;
}
