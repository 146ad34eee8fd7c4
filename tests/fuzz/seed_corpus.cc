// The seed corpus of the fuzz targets (seed_corpus.h).
#include "fuzz/seed_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "distributed/messages.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/register.h"
#include "ops/unary_ops.h"
#include "serialization/checkpoint_file.h"
#include "serialization/file_util.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "transport/ucx/wire.h"

namespace dflow::fuzz {
namespace {

Status Write(const std::filesystem::path& path, const std::string& bytes) {
  return serialization::WriteFileAtomically(path.string(), bytes);
}

// A tensor of `dtype` with varied bytes (booleans 0 or 1).
Tensor Filled(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.num_bytes(); ++i) {
    p[i] = static_cast<uint8_t>(dtype == DType::kBool ? i % 2 : 3 + 11 * i);
  }
  return t;
}

Result<Graph> TrainingGraph() {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 8});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto w1 = ops::InitializedVariable(root.WithOpName("w1"), Shape{8, 16},
                                     ops::Initializer::GlorotUniform(1));
  auto b1 = ops::InitializedVariable(root.WithOpName("b1"), Shape{16}, ops::Initializer::Zeros());
  auto w2 = ops::InitializedVariable(root.WithOpName("w2"), Shape{16, 3},
                                     ops::Initializer::GlorotUniform(2));
  auto h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w1.var), b1.var));
  auto logits = ops::MatMul(root.WithDevice("cpu:1"), h, w2.var);
  auto loss = ops::ReduceMean(root.WithOpName("loss"),
                              ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels).loss);
  ops::Adam adam({.learning_rate = 1e-3});
  adam.Minimize(root.WithOpName("train"), loss, {w1.var, b1.var, w2.var});
  RETURN_IF_ERROR(root.status());
  Graph g = root.graph();
  RETURN_IF_ERROR(g.Validate());
  return g;
}

Result<Graph> ConvGraph() {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1, 8, 8});
  auto w =
      ops::Const(root.WithOpName("w"), std::vector<float>(2 * 1 * 3 * 3, 0.5f), Shape{2, 1, 3, 3});
  auto c = ops::Conv2D(root.WithOpName("conv"), x, w, {.pads = {1, 1, 1, 1}});
  auto p = ops::MaxPool(root.WithOpName("pool"), ops::Relu(root, c));
  ops::Reshape(root.WithOpName("flat"), p, {-1, 32});
  RETURN_IF_ERROR(root.status());
  Graph g = root.graph();
  RETURN_IF_ERROR(g.Validate());
  return g;
}

// ONNX models: the first of ONNX's backend node tests (Debian's libonnx-testdata), one model
// of each of 60 ops.
Status WriteOnnxSeeds(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir / "onnx");
  const fs::path node = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(node)) return Status::OK();
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(node)) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (size_t i = 0; i < cases.size() && i < 60 * 15; i += 15) {
    fs::copy_file(cases[i] / "model.onnx", dir / "onnx" / (cases[i].filename().string() + ".onnx"),
                  fs::copy_options::overwrite_existing);
  }
  return Status::OK();
}

}  // namespace

Status WriteSeedCorpus(const std::filesystem::path& dir) {
  for (const char* sub : {"graph_file", "checkpoint_file", "npy", "wire"}) {
    std::filesystem::create_directories(dir / sub);
  }
  RETURN_IF_ERROR(WriteOnnxSeeds(dir));
  ASSIGN_OR_RETURN(Graph training, TrainingGraph());
  ASSIGN_OR_RETURN(Graph conv, ConvGraph());
  std::vector<std::string> assigned(conv.num_nodes(), "/job:localhost/task:0/device:CPU:0");
  assigned.back() = "/job:localhost/task:0/device:CPU:1";
  RETURN_IF_ERROR(Write(dir / "graph_file/training.dfg", serialization::EncodeGraph(training)));
  ASSIGN_OR_RETURN(std::string json,
                   serialization::GraphBytesToJson(serialization::EncodeGraph(conv), "conv"));
  RETURN_IF_ERROR(Write(dir / "graph_file/conv.json", json));
  RETURN_IF_ERROR(
      Write(dir / "graph_file/conv_assigned.dfg", serialization::EncodeGraph(conv, assigned)));
  RETURN_IF_ERROR(Write(dir / "graph_file/empty.dfg", serialization::EncodeGraph(Graph())));

  std::map<std::string, Tensor> vars = {
      {"w", Filled(DType::kF32, Shape{3, 2})},  {"step", Filled(DType::kI64, Shape{})},
      {"mask", Filled(DType::kBool, Shape{4})}, {"q", Filled(DType::kU8, Shape{2, 2, 2})},
      {"h", Filled(DType::kBF16, Shape{3})},    {"e", Filled(DType::kF64, Shape{0, 4})}};
  RETURN_IF_ERROR(
      Write(dir / "checkpoint_file/vars.dfckpt", serialization::EncodeCheckpoint(vars)));
  RETURN_IF_ERROR(Write(dir / "checkpoint_file/empty.dfckpt", serialization::EncodeCheckpoint({})));

  struct Array {
    const char* name;
    DType dtype;
    Shape shape;
  };
  for (const Array& a :
       {Array{"f32", DType::kF32, Shape{2, 3}}, Array{"f64", DType::kF64, Shape{}},
        Array{"i32", DType::kI32, Shape{0}}, Array{"i64", DType::kI64, Shape{5}},
        Array{"u8", DType::kU8, Shape{2, 2, 2}}, Array{"bool", DType::kBool, Shape{3}},
        Array{"f16", DType::kF16, Shape{4}}}) {
    auto bytes = serialization::EncodeNpy(Filled(a.dtype, a.shape));
    if (!bytes.ok()) continue;  // a dtype NumPy has no name for
    RETURN_IF_ERROR(Write(dir / "npy" / (std::string(a.name) + ".npy"), *bytes));
  }

  using namespace transport;
  TensorHeader tensor;
  tensor.key.src_device = "/job:worker/task:0/device:CPU:0";
  tensor.key.src_incarnation = 3;
  tensor.key.dst_device = "/job:worker/task:1/device:CPU:0";
  tensor.key.tensor = "h:0";
  tensor.key.step_id = 4;
  tensor.send_node = "h/_send";
  tensor.dtype = DType::kF32;
  tensor.shape = Shape{2, 3};
  tensor.bytes = 24;
  std::vector<Result<std::string>> messages = {
      Encode(Hello{kProtocolVersion, "/job:master/task:0", 1, std::string(kNonceBytes, 'n'),
                   std::string(32, 'p'), "/job:worker/task:1", "boot net:[1] ipc:[2]",
                   std::string("\x00\x01worker", 8)}),
      Encode(HelloReply{kProtocolVersion, false, "/job:worker/task:1", 2, "wrong token"}),
      Encode(tensor),
      Encode(AbortStep{4, Unavailable("lost task 1")}),
      Encode(CallRequest{9, 2}),
      Encode(CallResponse{9, NotFound("no such partition")}),
      EncodeHeartbeat()};
  // The rest by the decoder the first byte picks (loader_contract.h's WireProblem); 7, the
  // control messages, below.
  const std::vector<std::pair<int, Result<std::string>>> more = {
      {8,
       Encode(SameHost{"/job:worker/task:1", 2, std::string(32, 'p'), 77, 4096, 12345, 9, 31337})},
      {9, Encode(TensorRef{tensor, 4096, 3})},
      {9, Encode(TensorRef{tensor, 4096, 4, SharedRegion{7, 31338, 64, 64 << 20}})},
      {10, Encode(TensorRefDone{{3, 4}})},
      {11, Encode(PeerReads{true, true})},
      {12, Encode(DeviceTensorRef{tensor, 5, "cuda-ipc-handle"})},
      {13, Encode(Challenge{kProtocolVersion, std::string(kNonceBytes, 'c')})},
      {14, EncodeGoodbye()}};
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].ok()) return messages[i].status();
    RETURN_IF_ERROR(Write(dir / "wire" / ("message" + std::to_string(i)),
                          std::string(1, static_cast<char>(i)) + *messages[i]));
  }
  for (size_t i = 0; i < more.size(); ++i) {
    const auto& [which, bytes] = more[i];
    if (!bytes.ok()) return bytes.status();
    RETURN_IF_ERROR(Write(dir / "wire" / fmt::format("message{}_{}", which, i),
                          std::string(1, static_cast<char>(which)) + *bytes));
  }
  // One of each control message (distributed/messages.h), behind the bytes 7 and its number.
  using namespace distributed;
  PartitionShare share;
  share.feeds = {{0, "x"}};
  share.fetches = {{1, "y", 0}};
  share.targets = {"train"};
  Tensor values = Filled(DType::kF32, Shape{2, 3});
  const std::vector<std::string> control = {
      Encode(GetDevicesReply{
          {{"/job:worker/task:0/device:CPU:0", 7, 1e9, 1e11, 1e10, 1e-6}}, 1e-5, 2e10}),
      Encode(CompileRequest{
          "s1", 1, 2, true, true, {{"/job:worker/task:0/device:CPU:0", "graph bytes", share}}}),
      Encode(RunStepRequest{"s1", 4, 1000, true, {{0, values}}}),
      Encode(RunStepReply{
          {{1, values}},
          {{"/job:worker/task:0/device:CPU:0", {{"y", "Neg", NodeSpan{1, 2, 0, false}, ""}}}}}),
      Encode(ReleaseRequest{"s1", true}),
      Encode(ConnectPeersRequest{{{"/job:worker/task:0", "127.0.0.1:2222"}}}),
      Encode(VariablesRequest{{{"/job:worker/task:0/device:CPU:0", "w"}}}),
      Encode(VariableValues{{{"/job:worker/task:0/device:CPU:0", "w"}}, {values}}),
      Encode(MeasureLinksRequest{{"/job:worker/task:1"}}),
      Encode(MeasureLinksReply{{{"/job:worker/task:1", 1e-5, 1e9}}}),
      Encode(RegisterRequest{1, 2, "10.0.0.2:7001", {"cpu:0", "gpu:0"}, "Slurm"}),
      Encode(RegisterReply{"/job:worker/task:1", 2}),
      Encode(GetDevicesRequest{"training-run-7"})};
  for (size_t i = 0; i < control.size(); ++i) {
    RETURN_IF_ERROR(Write(dir / "wire" / ("control" + std::to_string(i)),
                          std::string{7, static_cast<char>(i)} + control[i]));
  }
  return Status::OK();
}

}  // namespace dflow::fuzz
