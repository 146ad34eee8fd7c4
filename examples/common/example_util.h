// Helpers shared by the examples: a trainable layer's variables and the error exit.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dflow/version.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "rewrite/mixed_precision.h"
#include "runtime/train/trainer.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "tools/cli.h"
#include "tools/device_list.h"
#if DFLOW_HAS_ONNX
#include "onnx/onnx_export.h"
#endif

namespace dflow::examples {

// The variables of one layer and their initialisers.
struct Params {
  std::vector<ops::VariableAndInit> vars;

  Output Add(const Scope& scope, const Shape& shape, const ops::Initializer& init) {
    vars.push_back(ops::InitializedVariable(scope, shape, init));
    return vars.back().var;
  }
  std::vector<Output> variables() const {
    std::vector<Output> v;
    for (const auto& p : vars) v.push_back(p.var);
    return v;
  }
  std::vector<std::string> init_targets() const {
    std::vector<std::string> t;
    for (const auto& p : vars) t.push_back(p.init.node_name());
    return t;
  }
};

// A dense layer in `scope`'s name scope: Glorot-initialised weights and zero bias, registered
// in `p`.
inline Output Dense(const Scope& scope, Params& p, Output in, int64_t n_in, int64_t n_out,
                    uint64_t seed) {
  Output w =
      p.Add(scope.WithOpName("w"), Shape{n_in, n_out}, ops::Initializer::GlorotUniform(seed));
  Output b = p.Add(scope.WithOpName("b"), Shape{n_out}, ops::Initializer::Zeros());
  return ops::BiasAdd(scope, ops::MatMul(scope, in, w), b);
}

// Prints `s` as one line "error: <Code>: <message>" and gives the exit status: 1, or
// tools::kUsageError for flags that do not go together.
inline int Fail(const Status& s, int code = 1) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return code;
}

// Adds one NoOp "init" that runs every node of `init_names` (initialisers, optimizer slots;
// nothing for an inference graph, none named).
inline Status AddInitOp(const Scope& root, const std::vector<std::string>& init_names) {
  if (init_names.empty()) return Status::OK();
  std::vector<Output> inits;
  for (const auto& name : init_names) {
    auto id = root.graph().FindNode(name);
    if (!id) return NotFound("no initialiser '{}' in the graph", name);
    inits.push_back(root.OutputOf(*id));
  }
  ops::NoOp(root.WithOpName("init").WithControlDependencies(inits));
  return root.status();
}

// --save: validates the scope's graph and writes it to `path` (.dfg, or .json for the JSON
// form). Returns the graph's node count.
inline Result<int> SaveScopeGraph(const Scope& root, const std::string& path) {
  RETURN_IF_ERROR(root.status());
  Graph graph = root.graph();
  RETURN_IF_ERROR(graph.Validate());
  RETURN_IF_ERROR(serialization::SaveGraph(graph, path));
  return graph.num_nodes();
}

// AddInitOp, then SaveScopeGraph.
inline Result<int> SaveGraphWithInit(const Scope& root, const std::vector<std::string>& init_names,
                                     const std::string& path) {
  RETURN_IF_ERROR(AddInitOp(root, init_names));
  return SaveScopeGraph(root, path);
}

// The command-line flags the training examples share, in the vocabulary of the tools
// (tools/cli.h): --devices as dflow-run takes it, --steps for a count of steps, usage errors
// exit 2.
struct TrainFlags {
  // Which groups an example takes beyond the batch, rate, seed, threads, data and --save flags.
  struct Uses {
    bool epochs = true;    // --epochs, --steps-per-epoch (else the example counts --steps)
    bool devices = true;   // --devices (else the example places on devices of its own)
    bool accuracy = true;  // --min-accuracy
    // --mixed-precision and --loss-scale (programs that train through TrainClassifier).
    bool mixed_precision = false;
  };
  int epochs;
  int64_t batch_size = 128;
  int64_t steps_per_epoch = 0;  // 0: whole epochs
  double lr = 1e-3;
  double min_accuracy = 0;
  uint64_t seed = 1;
  int threads = 0;
  std::string devices = "cpu:0";         // as given
  std::vector<std::string> device_list;  // canonical, after Check()
  std::string data_dir = kFashionMnistDir;
  std::string save_graph;   // write the training graph here and exit
  std::string save_batch;   // write a batch's feeds as .npy files into this folder and exit
  std::string export_onnx;  // after training: the inference part as an ONNX model
  std::string mixed_precision = "none";  // or bf16, f16: the products (rewrite/mixed_precision.h)
  std::string loss_scale = "auto";       // none, static, dynamic; auto: dynamic for f16
  // Not a flag: the placeholder fed with the images [N, 784] (a program whose model names its
  // input otherwise sets it).
  std::string images_feed = "x";

  explicit TrainFlags(int default_epochs) : epochs(default_epochs) {}

  void AddTo(CLI::App& app, Uses uses) {
    uses_ = uses;
    if (uses.epochs) {
      app.add_option("--epochs", epochs, "Passes over the training set")->check(tools::AtLeast(1));
      app.add_option("--steps-per-epoch", steps_per_epoch,
                     "Stop each epoch after this many steps (shortened runs; 0: whole epochs)")
          ->check(tools::AtLeast(0));
    }
    app.add_option("--batch-size", batch_size, "Examples per step")->check(tools::AtLeast(1));
    app.add_option("--lr", lr, "Learning rate")->check(tools::Positive());
    app.add_option("--seed", seed, "Seed for initialisation and shuffling");
    if (uses.accuracy) {
      app.add_option("--min-accuracy", min_accuracy,
                     "Exit with status 1 below this test accuracy (0 to 1)")
          ->check(CLI::Range(0.0, 1.0));
    }
    app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(tools::AtLeast(0));
    if (uses.devices) {
      app.add_option("--devices", devices,
                     "Where the graph runs, as dflow-run takes it: cpu:0, gpu:0 (where dflow was "
                     "built with CUDA and a GPU is present), or several, placed by the cost model");
    }
    if (uses.mixed_precision) {
      app.add_option("--mixed-precision", mixed_precision,
                     "Run the matmuls and convolutions in bf16 or f16, the variables, "
                     "normalisations, loss and updates staying f32 (none: all f32)")
          ->check(CLI::IsMember({"none", "bf16", "f16"}));
      app.add_option("--loss-scale", loss_scale,
                     "With --mixed-precision: scale the loss's gradient (static: by 65536; "
                     "dynamic: from 65536, skipping steps whose gradients overflow; auto: dynamic "
                     "for f16, none for bf16)")
          ->check(CLI::IsMember({"auto", "none", "static", "dynamic"}));
    }
    app.add_option("--data", data_dir, "Folder with the Fashion-MNIST IDX files");
    app.add_option("--save", save_graph,
                   "Write the training graph to FILE.dfg (or .json) for dflow-run and dflow-dot, "
                   "then exit without training");
    app.add_option("--export-onnx", export_onnx,
                   "After training, write the model (images -> logits) with its trained weights "
                   "to FILE as an ONNX model, and beside it FILE.images.npy (the first 100 test "
                   "images) and FILE.logits.npy (dflow's logits for them)");
    app.add_option("--save-batch", save_batch,
                   "Write one batch of --batch-size training images and labels, as the graph's "
                   "feeds, into the folder DIR (DIR/x.npy and DIR/labels.npy for dflow-run), "
                   "then exit without training");
  }
  void AddTo(CLI::App& app) { AddTo(app, Uses{}); }

  // After parsing: --devices made canonical. InvalidArgument naming the flag (a usage error).
  Status Check() {
#if !DFLOW_HAS_ONNX
    if (!export_onnx.empty()) {
      return InvalidArgument("--export-onnx: this build has no ONNX (libonnx-dev)");
    }
#endif
    if (!export_onnx.empty()) RETURN_IF_ERROR(serialization::CheckWritable(export_onnx));
    if (uses_.devices) {
      ASSIGN_OR_RETURN(device_list, tools::ParseDeviceList(devices));
    }
    return Status::OK();
  }

 private:
  Uses uses_;
};

// tools::Parse, then the flags' own checks: nullopt to go on, else the exit status (2 for a usage
// error, printed as one line).
inline std::optional<int> Parse(CLI::App& app, int argc, char** argv, TrainFlags& flags) {
  if (auto code = tools::Parse(app, argc, argv)) return code;
  if (Status s = flags.Check(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return tools::kUsageError;
  }
  return std::nullopt;
}

// --save-batch: the first batch of --batch-size training examples (seeded shuffle) as the
// feeds `feeds_of` makes of its images and labels, each written to DIR/NAME.npy. Prints what it
// wrote. Errors name the file.
inline Status SaveSampleBatch(
    const TrainFlags& f,
    const std::function<Session::Feeds(const Tensor& images, const Tensor& labels)>& feeds_of) {
  ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(true, f.data_dir));
  Batcher batches(train, f.batch_size, f.seed);
  batches.StartEpoch(0);
  Tensor images, labels;
  if (!batches.Next(&images, &labels)) {
    return InvalidArgument("--batch-size {} is larger than the training set ({} examples)",
                           f.batch_size, train.size());
  }
  std::filesystem::path dir = f.save_batch;
  for (const auto& [name, tensor] : feeds_of(images, labels)) {
    std::string path = (dir / (name + ".npy")).string();
    RETURN_IF_ERROR(serialization::WriteNpy(tensor, path));
    fmt::print("wrote feed '{}' ({}{}) to {}\n", name, DTypeName(tensor.dtype()), tensor.shape(),
               path);
  }
  return Status::OK();
}

// --check-split: FailedPrecondition naming the devices left without nodes when the placement of
// a multi-device session did not use every device.
inline Status CheckEveryDeviceHoldsNodes(const Session& session) {
  const auto& device_of = session.placement().device_of;
  std::string idle;
  for (int d = 0; d < session.device_set().size(); ++d) {
    if (std::find(device_of.begin(), device_of.end(), d) == device_of.end()) {
      idle += (idle.empty() ? "" : ", ") + session.device_set().DisplayName(d);
    }
  }
  if (idle.empty()) return Status::OK();
  return FailedPrecondition("--check-split: the placer put all {} nodes on {} and none on {}",
                            device_of.size(), session.device_set().DisplayName(device_of.at(0)),
                            idle);
}

// A session on the scope's graph with the flags' thread budget, its variables initialised: the
// parameters' initialisers and the optimizer's slots.
// Makes the session an example trains with (Session::Create when none is given: this process's
// devices).
using SessionMaker =
    std::function<Result<std::unique_ptr<Session>>(const Scope&, const SessionOptions&)>;

inline Result<std::unique_ptr<Session>> CreateInitializedSession(
    const Scope& root, const TrainFlags& f, const Params& params, const ops::Optimizer& opt,
    SessionOptions options = {}, const SessionMaker& make = {},
    const std::vector<std::string>& more_init = {}) {
  options.threads.num_threads = f.threads;
  if (options.devices.empty()) {
    // One device runs the whole graph; several are placed by the cost model.
    if (f.device_list.size() == 1) options.device = f.device_list[0];
    if (f.device_list.size() > 1) options.devices = f.device_list;
  }
  std::unique_ptr<Session> session;
  if (make) {
    ASSIGN_OR_RETURN(session, make(root, options));
  } else {
    ASSIGN_OR_RETURN(session, Session::Create(root, options));
  }
  std::vector<std::string> init = opt.init_targets();
  for (const auto& t : params.init_targets()) init.push_back(t);
  init.insert(init.end(), more_init.begin(), more_init.end());
  RETURN_IF_ERROR(session->Run({}, {}, init).status());
  return session;
}

// --mixed-precision: the training graph with its products in bf16 or f16 (and the loss scaling
// --loss-scale asks for), or nullopt for none. Prints what it converted.
inline Result<std::optional<ops::MixedPrecisionGraph>> MixedPrecisionOf(const Scope& root,
                                                                        const std::string& loss,
                                                                        const TrainFlags& f) {
  if (f.mixed_precision == "none") return std::optional<ops::MixedPrecisionGraph>();
  using Scaling = ops::MixedPrecisionOptions::LossScaling;
  ops::MixedPrecisionOptions o;
  ASSIGN_OR_RETURN(o.compute, ParseDType(f.mixed_precision));
  const std::string scale = f.loss_scale != "auto"     ? f.loss_scale
                            : o.compute == DType::kF16 ? "dynamic"
                                                       : "none";
  o.loss_scaling = scale == "dynamic"  ? Scaling::kDynamic
                   : scale == "static" ? Scaling::kStatic
                                       : Scaling::kNone;
  o.loss = loss;
  ASSIGN_OR_RETURN(ops::MixedPrecisionGraph mp, ops::MixedPrecision(root.graph(), o));
  std::printf("mixed precision: %d products in %s (%d casts), loss scaling %s\n", mp.converted,
              f.mixed_precision.c_str(), mp.casts,
              scale == "none" ? "off" : fmt::format("{} from {}", scale, o.initial_scale).c_str());
  std::fflush(stdout);
  return std::optional<ops::MixedPrecisionGraph>(std::move(mp));
}

// Names in the session's graph that TrainAndReport runs.
struct TrainTargets {
  std::string loss, train_target, logits;
};

// The line an example prints after every epoch.
inline void PrintEpoch(const EpochStats& e, double accuracy) {
  std::printf(
      "epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, %.0f examples/s, median step %.2f ms\n",
      e.epoch, e.mean_loss, 100 * accuracy, e.seconds, e.examples_per_second, e.median_step_ms);
  std::fflush(stdout);
}

// The exit status for the final test accuracy: 1, saying so, below --min-accuracy.
inline int CheckMinAccuracy(double accuracy, const TrainFlags& f) {
  if (accuracy >= f.min_accuracy) return 0;
  std::fprintf(stderr, "error: test accuracy %.2f%% is below the required %.2f%%\n", 100 * accuracy,
               100 * f.min_accuracy);
  return 1;
}

// Trains on `train`, printing loss, test accuracy and speed after every epoch; returns the exit
// status: 1 on an error or when the final test accuracy is below f.min_accuracy.
inline int TrainAndReport(Session& session, const Dataset& train, const Dataset& test,
                          const TrainFlags& f, const TrainTargets& t) {
  Batcher batches(train, f.batch_size, f.seed);
  double accuracy = 0;
  Status s = TrainLoop(
      session, batches,
      {.epochs = f.epochs,
       .images_feed = f.images_feed,
       .loss = t.loss,
       .train_target = t.train_target,
       .max_steps_per_epoch = f.steps_per_epoch},
      [&](const EpochStats& e) -> Status {
        // Test batches of the training batch's size: the placement (and a
        // device's memory limit) was sized for it.
        ASSIGN_OR_RETURN(accuracy, Accuracy(session, test, f.images_feed, t.logits, f.batch_size));
        PrintEpoch(e, accuracy);
        return Status::OK();
      });
  if (!s.ok()) return Fail(s);
  return CheckMinAccuracy(accuracy, f);
}

// --export-onnx: the part of the session's graph computing `logits` from the images, with the
// variables' values now, as an ONNX model; beside it the first 100 test images and dflow's logits
// for them (.npy), to compare with another runtime's. Errors name the file.
inline Status ExportClassifier(Session& session, const Dataset& test, const TrainFlags& f,
                               const std::string& logits) {
#if DFLOW_HAS_ONNX
  RETURN_IF_ERROR(onnx::ExportModel(session, {logits}, f.export_onnx));
  Batcher first(test, 100, 0, /*shuffle=*/false);
  first.StartEpoch(0);
  Tensor images, labels;
  if (!first.Next(&images, &labels)) return InvalidArgument("the test set has no 100 images");
  ASSIGN_OR_RETURN(auto out, session.Run({{f.images_feed, images}}, {logits}));
  RETURN_IF_ERROR(serialization::WriteNpy(images, f.export_onnx + ".images.npy"));
  RETURN_IF_ERROR(serialization::WriteNpy(out.at(0), f.export_onnx + ".logits.npy"));
  std::printf(
      "exported %s (the inference part, %s -> %s, trained) and dflow's logits for the "
      "first 100 test images: %s.images.npy, %s.logits.npy\n",
      f.export_onnx.c_str(), f.images_feed.c_str(), logits.c_str(), f.export_onnx.c_str(),
      f.export_onnx.c_str());
  return Status::OK();
#else
  (void)session, (void)test, (void)f, (void)logits;
  return Unimplemented("--export-onnx: this build has no ONNX (libonnx-dev)");
#endif
}

// The whole training program after the model: loads Fashion-MNIST, adds the mean cross-entropy
// of `logits` (fed by placeholders f.images_feed and "labels") and Adam, creates the
// session with `options`, calls `ready` (for a summary or a check; its error ends the program),
// prints `title` and trains with
// TrainAndReport. Returns the exit status.
// `eval_logits`: the node the test accuracy fetches, when not `logits` (a pipelined graph's
// forward-only copy, placer/pipeline.h).
inline int TrainClassifier(const Scope& root, Params& p, Output logits, Output labels,
                           const TrainFlags& f, const std::string& title,
                           SessionOptions options = {},
                           const std::function<Status(Session&)>& ready = {},
                           const SessionMaker& make = {}, const std::string& eval_logits = "") {
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = f.lr});
  auto step = adam.Minimize(root, loss, p.variables());
  // The session runs the graph --save writes, "init" included, so dflow-run places a saved graph
  // as the example does; with --mixed-precision, the rewritten one.
  std::vector<std::string> init_names = adam.init_targets();
  for (const auto& t : p.init_targets()) init_names.push_back(t);
  auto mixed = MixedPrecisionOf(root, loss.node_name(), f);
  if (!mixed.ok()) return Fail(mixed.status());
  const Scope graph = *mixed ? Scope::ExtendGraph(*(*mixed)->graph) : root;
  const std::vector<std::string> scale_init =
      *mixed ? (*mixed)->init_targets : std::vector<std::string>{};
  init_names.insert(init_names.end(), scale_init.begin(), scale_init.end());
  if (Status s = AddInitOp(graph, init_names); !s.ok()) return Fail(s);
  if (!f.save_graph.empty() || !f.save_batch.empty()) {
    if (!f.save_graph.empty()) {
      auto nodes = SaveScopeGraph(graph, f.save_graph);
      if (!nodes.ok()) return Fail(nodes.status());
      std::printf("saved the training graph (%d nodes; targets 'init' and '%s', loss '%s') to %s\n",
                  *nodes, step.name().c_str(), loss.name().c_str(), f.save_graph.c_str());
    }
    if (!f.save_batch.empty()) {
      Status s = SaveSampleBatch(f, [&](const Tensor& images, const Tensor& labels) {
        return Session::Feeds{{f.images_feed, images}, {"labels", labels}};
      });
      if (!s.ok()) return Fail(s);
    }
    return 0;
  }
  auto train = LoadFashionMnist(true, f.data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, f.data_dir);
  if (!test.ok()) return Fail(test.status());
  auto session = CreateInitializedSession(graph, f, p, adam, std::move(options), make, scale_init);
  if (!session.ok()) return Fail(session.status());
  if (ready) {
    if (Status s = ready(**session); !s.ok()) return Fail(s);
  }
  std::printf("%s: %lld training and %lld test images, batch %lld\n", title.c_str(),
              static_cast<long long>(train->size()), static_cast<long long>(test->size()),
              static_cast<long long>(f.batch_size));
  int code = TrainAndReport(**session, *train, *test, f,
                            {.loss = loss.name(),
                             .train_target = step.name(),
                             .logits = eval_logits.empty() ? logits.name() : eval_logits});
  if (code != 0 || f.export_onnx.empty()) return code;
  if (Status s = ExportClassifier(**session, *test, f, logits.name()); !s.ok()) return Fail(s);
  return 0;
}

}  // namespace dflow::examples
