// Trains a Fashion-MNIST classifier that comes as an ONNX file (defined and exported untrained
// elsewhere: export_fashion_mnist.py writes a PyTorch MLP and CNN): the model is imported with
// its float initializers as Variables (onnx::ImportOptions::trainable_initializers), the mean
// cross-entropy of its output and Adam are added to the imported graph, and dflow trains it,
// printing the test accuracy after every epoch.
//   onnx_fashion_mnist MODEL.onnx [--epochs N] [--min-accuracy A]
//   onnx_fashion_mnist MODEL.onnx --local-workers 2   data-parallel: a replica on each of N
//                                                    dflow-worker processes, gradients
//                                                    all-reduced (ops::Replicate)
// The model takes images [N, 784] (float, 0 to 1) and gives logits [N, classes].
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "examples/common/example_util.h"
#include "onnx/onnx_import.h"
#include "ops/array_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "rewrite/replicate.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "examples/common/local_cluster.h"
#endif

using namespace dflow;
using examples::Fail;

namespace {

// The imported model with what training adds: its Variables and their Assigns as the examples'
// Params, its logits, and a "labels" placeholder.
struct Trainable {
  Scope root;
  examples::Params params;
  Output logits, labels;
  std::string images;
};

Result<Trainable> Import(const std::string& path) {
  ASSIGN_OR_RETURN(onnx::ImportedModel model,
                   onnx::ImportModel(path, {.trainable_initializers = true, .init_op = ""}));
  if (model.inputs.size() != 1 || model.outputs.size() != 1) {
    return InvalidArgument(
        "model '{}' has {} inputs and {} outputs; a classifier here has one "
        "of each (images [N, 784] in, logits [N, classes] out)",
        path, model.inputs.size(), model.outputs.size());
  }
  if (model.variables.empty()) {
    return InvalidArgument("model '{}' has no float32 initializers, so nothing to train", path);
  }
  Trainable t{.root = Scope::ExtendGraph(std::move(model.graph))};
  ASSIGN_OR_RETURN(Output x, t.root.FindOutput(model.inputs[0]));
  const Shape& xs = x.shape();
  if (x.dtype() != DType::kF32 ||
      (!xs.unknown_rank() && (xs.rank() != 2 || (xs[1] != -1 && xs[1] != 784)))) {
    return InvalidArgument(
        "model '{}': input '{}' is {}{}; this program feeds Fashion-MNIST "
        "images as f32 [N, 784]",
        path, model.inputs[0], DTypeName(x.dtype()), xs);
  }
  t.images = x.node_name();
  ASSIGN_OR_RETURN(t.logits, t.root.FindOutput(model.outputs[0]));
  for (size_t i = 0; i < model.variables.size(); ++i) {
    ASSIGN_OR_RETURN(Output var, t.root.FindOutput(model.variables[i]));
    ASSIGN_OR_RETURN(Output init, t.root.FindOutput(model.assigns[i]));
    t.params.vars.push_back({var, init});
  }
  std::string labels = "labels";
  while (t.root.graph().FindNode(labels)) labels += "_";
  t.labels = ops::Placeholder(t.root.WithOpName(labels), DType::kI32, Shape{-1});
  RETURN_IF_ERROR(t.root.status());
  if (labels != "labels") {
    return InvalidArgument("model '{}' has a node named 'labels', the name of the labels' feed",
                           path);
  }
  return t;
}

#ifdef DFLOW_WITH_DISTRIBUTED
// Data-parallel training on the workers of `cluster`, one replica on each; the test accuracy is
// measured after every epoch by the single-replica graph on this process, restored from the
// replicas' checkpoint.
int TrainDataParallel(const std::string& path, examples::TrainFlags& flags,
                      const examples::LocalCluster& cluster) {
  auto single = Import(path);
  if (!single.ok()) return Fail(single.status());
  Trainable& m = *single;
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(m.root, m.logits, m.labels);
  auto loss = ops::ReduceMean(m.root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = flags.lr});
  auto step = adam.Minimize(m.root.WithOpName("train_step"), loss, m.params.variables());
  std::vector<std::string> init = adam.init_targets();
  for (const auto& name : m.params.init_targets()) init.push_back(name);
  if (Status s = examples::AddInitOp(m.root, init); !s.ok()) return Fail(s);

  const std::vector<std::string> devices = cluster.CpuDevices();
  const auto n = static_cast<int64_t>(devices.size());
  if (flags.batch_size % n != 0) {
    return Fail(
        InvalidArgument("--batch-size {} does not divide into {} replicas", flags.batch_size, n),
        tools::kUsageError);
  }
  ops::ReplicateOptions options{.devices = devices, .averaged = {"loss"}};
  auto replicated = ops::Replicate(m.root.graph(), options);
  if (!replicated.ok()) return Fail(replicated.status());
  SessionOptions session_options;
  session_options.threads.num_threads = flags.threads;
  auto session =
      distributed::DistributedSession::Create(*replicated->graph, session_options, cluster.options);
  if (!session.ok()) return Fail(session.status());
  auto eval = Session::Create(m.root, session_options);
  if (!eval.ok()) return Fail(eval.status());
  if (Status s = (*session)->Run({}, {}, {"init"}).status(); !s.ok()) return Fail(s);

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, flags.data_dir);
  if (!test.ok()) return Fail(test.status());
  std::printf("%s: %lld replicas, gradients in %d all-reduce buckets, batch %lld\n", path.c_str(),
              static_cast<long long>(n), replicated->buckets,
              static_cast<long long>(flags.batch_size));
  const std::string ckpt = (std::filesystem::temp_directory_path() /
                            fmt::format("onnx_fashion_mnist_{}.dfckpt", getpid()))
                               .string();
  double accuracy = 0;
  Batcher batches(*train, flags.batch_size, flags.seed);
  Status trained =
      TrainLoop(**session, batches,
                {.epochs = flags.epochs,
                 .images_feed = m.images,
                 .loss = loss.name(),
                 .train_target = step.node.node_name(),
                 .max_steps_per_epoch = flags.steps_per_epoch},
                [&](const EpochStats& e) -> Status {
                  RETURN_IF_ERROR((*session)->SaveCheckpoint(ckpt));
                  Status restored = (*eval)->RestoreCheckpoint(ckpt);
                  std::filesystem::remove(ckpt);
                  RETURN_IF_ERROR(restored);
                  ASSIGN_OR_RETURN(accuracy, Accuracy(**eval, *test, m.images, m.logits.name()));
                  examples::PrintEpoch(e, accuracy);
                  return Status::OK();
                });
  if (!trained.ok()) return Fail(trained);
  return examples::CheckMinAccuracy(accuracy, flags);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains a Fashion-MNIST classifier given as an ONNX file");
  examples::TrainFlags flags(10);
  std::string model;
  int local_workers = 0;
  tools::Configure(app, "onnx_fashion_mnist");
  app.add_option("model", model, "The ONNX model: images [N, 784] in, logits [N, classes] out")
      ->required();
  flags.AddTo(app);
  app.add_option("--local-workers", local_workers,
                 "Train data-parallel: start N dflow-worker processes here, a replica on each "
                 "(0: train in this process)")
      ->check(CLI::Range(0, 8));
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;

  if (local_workers > 0) {
#ifdef DFLOW_WITH_DISTRIBUTED
    if (!flags.save_graph.empty() || !flags.save_batch.empty()) {
      return Fail(InvalidArgument("--save and --save-batch train in this process: leave out "
                                  "--local-workers"),
                  tools::kUsageError);
    }
    examples::ClusterFlags started_here;
    started_here.local_workers = local_workers;
    auto cluster =
        examples::StartCluster(argv[0], started_here, "onnx-fashion-mnist", {"--threads", "1"});
    if (!cluster.ok()) return Fail(cluster.status());
    return TrainDataParallel(model, flags, *cluster);
#else
    return Fail(Unimplemented("this build has no UCX, so no workers"));
#endif
  }
  auto t = Import(model);
  if (!t.ok()) return Fail(t.status());
  flags.images_feed = t->images;
  return examples::TrainClassifier(t->root, t->params, t->logits, t->labels, flags,
                                   "Fashion-MNIST, " + model);
}
