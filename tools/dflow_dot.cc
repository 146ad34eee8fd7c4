// dflow-dot: draws a graph file and where its nodes run, as Graphviz DOT (or SVG or PNG through
// Graphviz's dot program).
//
//   dflow-dot model.dfg --devices cpu:0,cpu:1 -o model.svg
//   dflow-dot model.dfg --cluster cluster.json --token-file token -o model.svg
//
// One cluster per device, nodes coloured by device; devices of a task ("/job:worker/task:1/...")
// are drawn inside one box per task. With --cluster the graph is placed over the devices of the
// cluster's dflow-workers, as `dflow-run --cluster` places it (nothing runs). Edges that cross
// devices (a Send/Recv pair at run time) are drawn bold and labelled with the tensor's type and
// bytes; control edges are dashed. With --devices the graph is placed as dflow-run would place it
// (the placement's summary goes to stderr); without, a node's device is the one the file says it
// was assigned, else the one it requests, else "any".
// --micro-batches M with --stages K (or --devices) and --assume-batch B draws the stages a
// training graph is cut into for pipeline parallelism (placer/pipeline.h, as dflow-run
// --micro-batches cuts it; --loss names the loss): one box per stage and its device, the plan
// (stage times, memory, predicted step) on stderr.
// --collapse-scopes draws one box per name scope ("dense1/...") and device. Exit codes: 0
// success, 1 an error while loading, placing or drawing, 2 a usage error; errors go to stderr
// as one line "error: <Code>: <message>".
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <set>

#include "graph/device_name.h"
#include "ops/register.h"
#include "runtime/session.h"
#include "runtime/session_devices.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "tools/cli.h"
#include "tools/graph_input.h"
#include "tools/pipeline_flags.h"
#include "tools/placement_flags.h"
#include "tools/subprocess.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#endif

using namespace dflow;

namespace {

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return code;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";  // DOT's line break
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The label of a tensor crossing devices: "f32[128,784] 392.0 KiB", or "f32[?,784]".
std::string TensorLabel(const Node& producer, int output) {
  if (output < 0) return "control";
  DType dtype = producer.output_dtype(output);
  const Shape& shape = producer.output_shape(output);
  std::string label = fmt::format("{}{}", DTypeName(dtype), shape);
  if (shape.fully_defined()) {
    double bytes = static_cast<double>(shape.num_elements()) * DTypeSize(dtype);
    label += bytes < 1024        ? fmt::format(" {:.0f} B", bytes)
             : bytes < (1 << 20) ? fmt::format(" {:.1f} KiB", bytes / 1024)
                                 : fmt::format(" {:.1f} MiB", bytes / (1 << 20));
  }
  return label;
}

// Runs Graphviz's dot (found on PATH, no shell: `out` is never interpreted) with the DOT text on
// its stdin, and writes what it prints to `out` atomically.
Status RenderWithGraphviz(const std::string& dot, const std::string& format,
                          const std::string& out) {
  auto ran = tools::RunProgram({"dot", "-T" + format}, dot);
  if (!ran.ok()) {
    if (ran.status().code() == StatusCode::kNotFound) {
      return NotFound(
          "writing {} needs Graphviz's dot program, which is not on PATH (apt install "
          "graphviz); -o {}.dot writes DOT without it",
          out, out.substr(0, out.rfind('.')));
    }
    return ran.status().WithPrefix("writing " + out + ": ");
  }
  if (ran->exit_code != 0) {
    std::string why = ran->err.substr(0, ran->err.find('\n'));
    std::string how = ran->exit_code >= 0 ? fmt::format("exit status {}", ran->exit_code)
                                          : fmt::format("signal {}", ran->signal);
    return Internal("writing {}: Graphviz's dot -T{} failed ({}){}{}", out, format, how,
                    why.empty() ? "" : ": ", why);
  }
  return serialization::WriteFileAtomically(out, ran->out);
}

// "/job:worker/task:1" of a device named so, else empty.
std::string TaskOf(const std::string& device) {
  auto name = DeviceName::Parse(device);
  if (!name.ok() || !name->job || !name->task) return "";
  return fmt::format("/job:{}/task:{}", *name->job, *name->task);
}

constexpr const char* kColours[] = {"#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f",
                                    "#cab2d6", "#ffff99", "#1f78b4", "#33a02c"};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Draws a dflow graph file and its placement with Graphviz");
  tools::Configure(app, "dflow-dot");
  std::string graph_path, out;
  tools::PlacementFlags placement;
  bool collapse = false;
  std::string cluster_file, token_file;
  app.add_option("graph", graph_path, "The graph file (.dfg, or its JSON form)")->required();
  placement.AddTo(app,
                  "cpu:0,cpu:1,gpu:0,...: place the graph on these devices first, as dflow-run "
                  "would");
  app.add_flag("--collapse-scopes", collapse, "One box per name scope and device");
  app.add_option("--cluster", cluster_file,
                 "Place the graph over the dflow-workers of this cluster spec (JSON: {\"worker\": "
                 "[\"HOST:PORT\", ...]}) and draw one box per task");
  app.add_option("--token-file", token_file, "The cluster token (with --cluster)");
  tools::PipelineFlags pipeline;
  pipeline.AddTo(app, /*graph_names=*/true, "--devices");
  app.add_option("-o,--output", out,
                 "OUT.dot, OUT.svg or OUT.png (SVG and PNG need Graphviz's dot); default: DOT "
                 "on stdout");
  if (auto code = tools::Parse(app, argc, argv)) return *code;
  if (Status s = placement.Check(); !s.ok()) return Fail(s, tools::kUsageError);
  if (Status s = pipeline.Check(app); !s.ok()) return Fail(s, tools::kUsageError);
  if (pipeline.on()) {
    if (!cluster_file.empty()) {
      return Fail(InvalidArgument("--micro-batches draws the stages on this process's devices "
                                  "(--stages or --devices), not a cluster's"),
                  2);
    }
    if (pipeline.LocalDevices(placement.device_list).empty()) {
      return Fail(InvalidArgument("--micro-batches needs the stages' devices: --stages or "
                                  "--devices"),
                  2);
    }
    if (placement.assume_batch <= 0) {
      return Fail(InvalidArgument("--micro-batches needs --assume-batch: the batch the stages "
                                  "are planned for"),
                  2);
    }
  }
  if (cluster_file.empty() != token_file.empty()) {
    return Fail(InvalidArgument("--cluster and --token-file go together"), 2);
  }
  if (!cluster_file.empty() && !placement.devices.empty()) {
    return Fail(InvalidArgument("--devices and --cluster: the cluster's workers are the devices"),
                2);
  }
  if (placement.devices.empty() && cluster_file.empty() && placement.tunes_placer() &&
      !pipeline.on()) {
    return Fail(InvalidArgument("--memory-limit and --assume-batch tune the placer; give "
                                "--devices or --cluster to place the graph"),
                2);
  }
  std::string format = "dot";
  if (!out.empty()) {
    size_t dot = out.rfind('.');
    format = dot == std::string::npos ? "" : out.substr(dot + 1);
    if (format != "dot" && format != "svg" && format != "png") {
      return Fail(InvalidArgument("-o '{}': the name must end in .dot, .svg or .png", out), 2);
    }
  }

  ops::RegisterStandardOps();
  std::vector<std::string> assigned;
  auto loaded = tools::LoadGraphFile(graph_path, &assigned);
  if (!loaded.ok()) return Fail(loaded.status(), 1);
  Graph graph = std::move(*loaded);
  std::vector<std::string> device_of(graph.num_nodes());
  if (!cluster_file.empty()) {
#ifdef DFLOW_WITH_DISTRIBUTED
    distributed::DistributedOptions cluster;
    auto spec = distributed::ClusterSpec::Load(cluster_file);
    if (!spec.ok()) return Fail(spec.status(), 1);
    cluster.cluster = *spec;
    auto token = distributed::ReadTokenFile(token_file);
    if (!token.ok()) return Fail(token.status().WithPrefix("--token-file: "), 1);
    cluster.token = *token;
    SessionOptions options;
    placement.ApplyTo(options);
    auto session = distributed::DistributedSession::Create(graph, options, cluster);
    if (!session.ok()) return Fail(session.status(), 1);
    std::fprintf(stderr, "%s\n", tools::PlacementSummary(**session).c_str());
    for (int v = 0; v < graph.num_nodes(); ++v) {
      device_of[v] =
          (*session)->device_set().device((*session)->placement().device_of[v]).canonical();
    }
#else
    return Fail(Unimplemented("--cluster: this dflow-dot was built without UCX"), 1);
#endif
  } else if (pipeline.on()) {
    // The single graph's nodes by the stage the pipeline puts them on.
    SessionOptions options;
    placement.ApplyTo(options);
    options.devices = pipeline.LocalDevices(placement.device_list);
    if (Status s = graph.Validate(); !s.ok()) return Fail(s, 1);
    auto devices = CreateSessionDevices(options);
    if (!devices.ok()) return Fail(devices.status(), 1);
    int64_t micro_batch = 0;
    auto piped = pipeline.Apply(graph, options.devices, devices->set, placement.assume_batch,
                                static_cast<double>(placement.memory_bytes), stderr, &micro_batch);
    if (!piped.ok()) return Fail(piped.status(), 1);
    for (int v = 0; v < graph.num_nodes(); ++v) {
      auto stage = piped->stage_of.find(graph.node(v).name());
      device_of[v] = stage == piped->stage_of.end() ? "any"
                                                    : fmt::format("stage {}: {}", stage->second,
                                                                  options.devices[stage->second]);
    }
  } else if (!placement.devices.empty()) {
    // The pipeline's first stages, as a session would run them, without making one.
    SessionOptions options;
    placement.ApplyTo(options);
    if (Status s = graph.Validate(); !s.ok()) return Fail(s, 1);
    auto devices = CreateSessionDevices(options);
    if (!devices.ok()) return Fail(devices.status(), 1);
    auto placed = PlaceForSession(graph, devices->set, options);
    if (!placed.ok()) return Fail(placed.status(), 1);
    std::fprintf(stderr, "%s\n", tools::PlacementSummary(devices->set, *placed).c_str());
    for (int v = 0; v < graph.num_nodes(); ++v) {
      device_of[v] = devices->set.DisplayName(placed->device_of[v]);
    }
  } else {
    for (int v = 0; v < graph.num_nodes(); ++v) {
      const std::string& requested = graph.node(v).requested_device();
      device_of[v] = !assigned[v].empty() ? assigned[v] : !requested.empty() ? requested : "any";
    }
  }

  // Boxes: a node, or with --collapse-scopes the node's first scope on its device.
  auto box_of = [&](int v) {
    const std::string& name = graph.node(v).name();
    size_t slash = name.find('/');
    if (!collapse || slash == std::string::npos) return name;
    return name.substr(0, slash) + "/*@" + device_of[v];
  };
  std::map<std::string, std::vector<int>> clusters;  // device -> nodes
  for (int v = 0; v < graph.num_nodes(); ++v) clusters[device_of[v]].push_back(v);
  std::string dot =
      "digraph dflow {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", "
      "fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", "
      "fontsize=8];\n";
  int k = 0;
  std::set<std::string> drawn;
  // Devices of one task sit in the task's box: the map's order keeps them together.
  std::string open_task;
  std::set<std::string> tasks;
  for (const auto& [device, nodes] : clusters) {
    const std::string task = TaskOf(device);
    if (task != open_task) {
      if (!open_task.empty()) dot += "  }\n";
      if (!task.empty()) {
        dot += fmt::format(
            "  subgraph cluster_task_{} {{\n    label={};\n    style=\"rounded,dashed\";\n"
            "    color=\"#444444\";\n    penwidth=2;\n",
            tasks.size(), Quote(task));
        tasks.insert(task);
      }
      open_task = task;
    }
    const char* colour = kColours[k % std::size(kColours)];
    dot += fmt::format("  subgraph cluster_{} {{\n    label={};\n    color=\"#888888\";\n", k,
                       Quote(task.empty() ? device : device.substr(task.size() + 1)));
    std::map<std::string, int> collapsed;
    for (int v : nodes) {
      std::string box = box_of(v);
      if (box != graph.node(v).name()) {
        collapsed[box]++;
        continue;
      }
      dot += fmt::format("    {} [label={}, fillcolor=\"{}\"];\n", Quote(box),
                         Quote(graph.node(v).name() + "\n" + graph.node(v).op()), colour);
    }
    for (const auto& [box, count] : collapsed) {
      dot += fmt::format("    {} [label={}, fillcolor=\"{}\", shape=box3d];\n", Quote(box),
                         Quote(box.substr(0, box.find('@')) +
                               fmt::format("\n{} node{}", count, count == 1 ? "" : "s")),
                         colour);
    }
    dot += "  }\n";
    ++k;
  }
  if (!open_task.empty()) dot += "  }\n";
  int crossing = 0;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const Node& node = graph.node(v);
    auto edge = [&](int u, int output) {
      std::string from = box_of(u), to = box_of(v);
      if (from == to) return;
      bool cross = device_of[u] != device_of[v];
      std::string key = from + "->" + to + (output < 0 ? "^" : "");
      if (!drawn.insert(key).second) return;
      std::string attrs;
      if (cross) {
        ++crossing;
        attrs = fmt::format("color=\"#d62728\", penwidth=2, label={}",
                            Quote("Send/Recv\n" + TensorLabel(graph.node(u), output)));
      }
      if (output < 0) attrs += std::string(attrs.empty() ? "" : ", ") + "style=dashed";
      dot += fmt::format("  {} -> {}{};\n", Quote(from), Quote(to),
                         attrs.empty() ? "" : " [" + attrs + "]");
    };
    for (const auto& e : node.inputs()) edge(e.node, e.index);
    for (int c : node.control_inputs()) edge(c, -1);
  }
  dot += "}\n";

  if (out.empty()) {
    std::fputs(dot.c_str(), stdout);
  } else if (format == "dot") {
    if (Status s = serialization::WriteFileAtomically(out, dot); !s.ok()) return Fail(s, 1);
  } else if (Status s = RenderWithGraphviz(dot, format, out); !s.ok()) {
    return Fail(s, 1);
  }
  std::fprintf(stderr, "%s%d devices, %d nodes, %d cross-device edges\n",
               tasks.empty() ? "" : fmt::format("{} tasks, ", tasks.size()).c_str(),
               static_cast<int>(clusters.size()), graph.num_nodes(), crossing);
  return 0;
}
