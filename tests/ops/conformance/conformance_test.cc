// The op conformance harness: every case of op_cases.h on every registered device type. On the
// CPU each case is held to its plain-loop reference and its gradient to central finite
// differences (in double precision where the op takes f64); on any other device type both are
// held to the CPU kernel's results. A device type without a kernel for the case's op skips it,
// naming op and type, so a new backend's run lists exactly the ops it lacks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <set>
#include <tuple>

#include "framework/device_factory.h"
#include "framework/device_types_under_test.h"
#include "framework/kernel.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "op_cases.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "runtime/session.h"
#include "status_matchers.h"

namespace dflow::conformance {
namespace {

constexpr const char* kReferenceType = "CPU";

SessionOptions OptionsFor(const std::string& type) {
  SessionOptions o;
  std::string lower = type;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  o.device = lower + ":0";
  o.fuse_epilogues = false;  // the node under test runs as itself
  o.calibrate_devices = false;
  return o;
}

// A case's graph on placeholders in0, in1, ... fed with `inputs`.
struct CaseRun {
  Scope root = Scope::NewRootScope();
  std::vector<Output> placeholders;
  CaseGraph graph;
  Session::Feeds feeds;
};

// Builds `c` on `inputs` (which may differ in float dtype from c.inputs). Fails when the scope
// records an error or the graph lacks a node of c.op.
Status Build(const OpCase& c, const std::vector<Tensor>& inputs, CaseRun& run) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    run.placeholders.push_back(
        ops::Placeholder(run.root.WithOpName(name), inputs[i].dtype(), inputs[i].shape()));
    run.feeds.push_back({name, inputs[i]});
  }
  run.graph = c.build(run.root, run.placeholders);
  if (!run.root.ok()) return run.root.status();
  const Graph& g = run.root.graph();
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op() == c.op) return Status::OK();
  }
  return InvalidArgument("case {} builds no {} node", c.name, c.op);
}

// Creates a session on `type` and runs the case's init targets once.
Result<std::unique_ptr<Session>> Start(const CaseRun& run, const std::string& type) {
  ASSIGN_OR_RETURN(auto session, Session::Create(run.root, OptionsFor(type)));
  if (!run.graph.init_targets.empty()) {
    RETURN_IF_ERROR(session->Run(run.feeds, {}, run.graph.init_targets).status());
  }
  return session;
}

std::vector<std::string> Names(const std::vector<Output>& outputs) {
  std::vector<std::string> names;
  for (const auto& o : outputs) names.push_back(o.name());
  return names;
}

Result<std::vector<Tensor>> RunForward(const OpCase& c, const std::string& type) {
  CaseRun run;
  RETURN_IF_ERROR(Build(c, c.inputs, run));
  ASSIGN_OR_RETURN(auto session, Start(run, type));
  return session->Run(run.feeds, Names(run.graph.outputs));
}

// Relative tolerance of a dtype, times the case's factor; also the absolute floor.
double Tolerance(DType dtype, double scale) {
  return (dtype == DType::kF64 ? 1e-10 : 1e-5) * scale;
}

// Same dtype and shape, and values within tolerance (exact for integers and bools; NaN matches
// NaN, an infinity the same infinity).
::testing::AssertionResult AllClose(const Tensor& got, const Tensor& want, double tol,
                                    const std::string& what) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << what << ": got " << DTypeName(got.dtype()) << got.shape().ToString() << ", want "
           << DTypeName(want.dtype()) << want.shape().ToString();
  }
  bool exact = !IsFloatingPoint(want.dtype());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double g = ElementAsDouble(got, i), w = ElementAsDouble(want, i);
    bool ok = exact           ? g == w
              : std::isnan(w) ? std::isnan(g)
              : std::isinf(w) ? g == w
                              : std::abs(g - w) <= tol * (1 + std::abs(w));
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::string coords;
  for (int64_t x : Unravel(want.shape(), first))
    coords += fmt::format("{}{}", coords.empty() ? "" : ",", x);
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << want.num_elements() << " elements differ; first at ["
         << coords << "]: got " << ElementAsDouble(got, first) << ", want "
         << ElementAsDouble(want, first) << " (tolerance " << tol << ")";
}

void ExpectOutputsClose(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol,
                        const std::string& against) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(AllClose(got[i], want[i], Tolerance(want[i].dtype(), tol),
                         "output " + std::to_string(i) + " against " + against));
  }
}

// ---- Gradients ----

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF64; }

std::vector<int> GradInputs(const OpCase& c) {
  if (!c.grad_inputs.empty()) return c.grad_inputs;
  std::vector<int> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (IsFloat(c.inputs[i].dtype())) out.push_back(static_cast<int>(i));
  }
  return out;
}

std::vector<int> GradOutputs(const OpCase& c, const std::vector<Tensor>& outputs) {
  if (!c.grad_outputs.empty()) return c.grad_outputs;
  std::vector<int> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (IsFloat(outputs[i].dtype())) out.push_back(static_cast<int>(i));
  }
  return out;
}

bool HasGradient(const OpCase& c) {
  const OpDef* def = OpRegistry::Global().Find(c.op);
  if (!def || !def->grad_fn || !c.no_gradient.empty()) return false;
  if (GradInputs(c).empty()) return false;
  return !GradOutputs(c, c.reference(c.inputs)).empty();
}

// The inputs with every floating-point one converted to `dtype`.
std::vector<Tensor> WithFloatType(const std::vector<Tensor>& inputs, DType dtype) {
  std::vector<Tensor> out;
  for (const auto& t : inputs) out.push_back(IsFloat(t.dtype()) ? CastTo(t, dtype) : t.Clone());
  return out;
}

// The case's graph with loss = sum_i ReduceSum(y_i * weights_i) over the gradient outputs.
struct LossRun {
  CaseRun run;
  Output loss;
  std::vector<Output> grads;
};

Status BuildLoss(const OpCase& c, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& weights, bool with_gradients, LossRun& lr) {
  RETURN_IF_ERROR(Build(c, inputs, lr.run));
  const Scope& s = lr.run.root;
  std::vector<Output> terms;
  std::vector<int> outs = GradOutputs(c, weights);
  for (size_t k = 0; k < outs.size(); ++k) {
    Output y = lr.run.graph.outputs[outs[k]];
    Tensor w = CastTo(weights[outs[k]], y.dtype());
    terms.push_back(ops::ReduceSum(s, ops::Mul(s, y, ops::Const(s, w))));
  }
  lr.loss = terms.size() == 1 ? terms[0] : ops::AddN(s, terms);
  if (!s.ok()) return s.status();
  if (!with_gradients) return Status::OK();
  std::vector<Output> xs;
  for (int i : GradInputs(c)) xs.push_back(lr.run.placeholders[i]);
  ASSIGN_OR_RETURN(lr.grads, Gradients(s, lr.loss, xs));
  return Status::OK();
}

Result<std::vector<Tensor>> RunGradients(const OpCase& c, const std::vector<Tensor>& weights,
                                         const std::string& type) {
  LossRun lr;
  RETURN_IF_ERROR(BuildLoss(c, c.inputs, weights, true, lr));
  ASSIGN_OR_RETURN(auto session, Start(lr.run, type));
  return session->Run(lr.run.feeds, Names(lr.grads));
}

// Checks `analytic` (the gradients of the gradient inputs) against central differences of the
// loss on the CPU, in double precision when the op takes f64 and in the case's own precision
// otherwise, element by element (a random sample of the elements when there are many).
void ExpectMatchesFiniteDifferences(const OpCase& c, const std::vector<Tensor>& weights,
                                    const std::vector<Tensor>& analytic, uint32_t seed) {
  LossRun lr;
  DType fd_type = DType::kF64;
  double eps = 1e-6, tol = (c.inputs[GradInputs(c)[0]].dtype() == DType::kF64 ? 1e-6 : 2e-4);
  std::vector<Tensor> inputs = WithFloatType(c.inputs, DType::kF64);
  // The double-precision graph must compute the loss in double precision too (a Cast to f32
  // inside would not).
  if (!BuildLoss(c, inputs, weights, false, lr).ok() || lr.loss.dtype() != DType::kF64) {
    lr = LossRun();
    fd_type = c.inputs[GradInputs(c)[0]].dtype();
    eps = 1e-3;
    tol = 1e-2;
    inputs = WithFloatType(c.inputs, fd_type);
    Status s = BuildLoss(c, inputs, weights, false, lr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  tol *= c.tolerance;
  auto session = Start(lr.run, kReferenceType);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto loss_at = [&]() -> double {
    auto out = (*session)->Run(lr.run.feeds, {lr.loss.name()});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? ElementAsDouble(out->at(0), 0) : 0.0;
  };
  std::vector<int> gi = GradInputs(c);
  // Every element of the gradient inputs, or a random sample of them when there are many.
  std::vector<std::pair<size_t, int64_t>> elements;
  for (size_t k = 0; k < gi.size(); ++k) {
    for (int64_t j = 0; j < inputs[gi[k]].num_elements(); ++j) elements.push_back({k, j});
  }
  constexpr size_t kMaxElements = 512;
  if (elements.size() > kMaxElements) {
    std::mt19937 gen(seed);
    std::shuffle(elements.begin(), elements.end(), gen);
    elements.resize(kMaxElements / 2);
  }
  for (const auto& [k, j] : elements) {
    // The feeds share the inputs' buffers: perturb in place, then restore.
    Tensor& fed = lr.run.feeds[gi[k]].second;
    double saved = ElementAsDouble(fed, j);
    auto set = [&](double v) {
      Tensor one = FromDoubles(fd_type, Shape{}, {v});
      std::memcpy(static_cast<char*>(fed.raw_data()) + j * DTypeSize(fd_type), one.raw_data(),
                  DTypeSize(fd_type));
    };
    set(saved + eps);
    double up = loss_at();
    set(saved - eps);
    double down = loss_at();
    set(saved);
    double numeric = (up - down) / (2 * eps);
    double got = ElementAsDouble(analytic[k], j);
    ASSERT_NEAR(got, numeric, tol * std::max({1.0, std::abs(got), std::abs(numeric)}))
        << "d loss / d input " << gi[k] << " at flat index " << j
        << " against central differences in " << DTypeName(fd_type);
  }
}

// ---- The tests ----

using Param = std::tuple<std::string, size_t>;  // device type, case index

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param) + "_" + AllOpCases()[std::get<1>(info.param)].name;
}

std::vector<size_t> AllIndices() {
  std::vector<size_t> out(AllOpCases().size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = i;
  return out;
}

std::vector<size_t> GradientIndices() {
  std::vector<size_t> out;
  for (size_t i = 0; i < AllOpCases().size(); ++i) {
    const OpCase& c = AllOpCases()[i];
    if (c.build && HasGradient(c) && c.reference(c.inputs).size() > 0) {
      CaseRun probe;
      if (Build(c, c.inputs, probe).ok() && probe.graph.init_targets.empty()) out.push_back(i);
    }
  }
  return out;
}

class OpConformanceTest : public ::testing::TestWithParam<Param> {
 protected:
  const std::string& type() const { return std::get<0>(GetParam()); }
  const OpCase& op_case() const { return AllOpCases()[std::get<1>(GetParam())]; }
  // True (the test skips, saying why) when the device type has no kernel for the case's op and
  // NotOnDevice() says why; a gap without a reason fails the test.
  bool SkipWithoutKernel() {
    // Kernels register when a type's first device is made; a test run alone (ctest) comes first.
    Status registered = DeviceFactory::Global().RegisterKernels();
    EXPECT_TRUE(registered.ok()) << registered.ToString();
    if (KernelRegistry::Global().Find(op_case().op, type()) != nullptr) return false;
    reason_ = GapReason(type(), op_case().op);
    return true;
  }
  static std::string GapReason(const std::string& type, const std::string& op) {
    auto t = NotOnDevice().find(type);
    if (t == NotOnDevice().end()) return "";
    auto o = t->second.find(op);
    return o == t->second.end() ? "" : o->second;
  }
  std::string reason_;
};

// Skips the test when its device type lacks the op's kernel for a listed reason; fails it when
// the reason is missing.
#define DFLOW_SKIP_OR_FAIL_WITHOUT_KERNEL()                                                  \
  if (SkipWithoutKernel()) {                                                                 \
    if (reason_.empty()) {                                                                   \
      FAIL() << "no " << type() << " kernel for " << op_case().op                            \
             << " and no reason in NotOnDevice() (op_cases.cc): give the device the kernel " \
                "or say why it has none";                                                    \
    }                                                                                        \
    GTEST_SKIP() << "no " << type() << " kernel for " << op_case().op << ": " << reason_;    \
  }

TEST_P(OpConformanceTest, Forward) {
  const OpCase& c = op_case();
  DFLOW_SKIP_OR_FAIL_WITHOUT_KERNEL();
  auto got = RunForward(c, type());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  if (type() == kReferenceType) {
    ExpectOutputsClose(*got, c.reference(c.inputs), c.tolerance, "the plain-loop reference");
  } else {
    auto want = RunForward(c, kReferenceType);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ExpectOutputsClose(*got, *want, c.tolerance, "the CPU kernel");
  }
}

class OpGradientConformanceTest : public OpConformanceTest {};

TEST_P(OpGradientConformanceTest, Gradient) {
  const OpCase& c = op_case();
  DFLOW_SKIP_OR_FAIL_WITHOUT_KERNEL();
  // Random weights make every output element count in the loss.
  CaseRng rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  std::vector<Tensor> weights;
  for (const auto& y : c.reference(c.inputs)) {
    weights.push_back(IsFloat(y.dtype()) ? rng.Uniform(y.dtype(), y.shape(), -1, 1, 0) : y);
  }
  auto got = RunGradients(c, weights, type());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<int> gi = GradInputs(c);
  ASSERT_EQ(got->size(), gi.size());
  for (size_t k = 0; k < gi.size(); ++k) {
    ASSERT_EQ(got->at(k).shape(), c.inputs[gi[k]].shape()) << "gradient of input " << gi[k];
  }
  if (type() == kReferenceType) {
    ExpectMatchesFiniteDifferences(c, weights, *got, static_cast<uint32_t>(rng.gen()()));
  } else {
    auto want = RunGradients(c, weights, kReferenceType);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ExpectOutputsClose(*got, *want, 10 * c.tolerance, "the CPU gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(testing::DeviceTypesUnderTest()),
                                            ::testing::ValuesIn(AllIndices())),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradientConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(testing::DeviceTypesUnderTest()),
                                            ::testing::ValuesIn(GradientIndices())),
                         ParamName);

// Inputs a kernel refuses at run time (their shapes unknown when the graph was built): the
// op's shared prologue (ops/common/*_kernels.h) refuses them on every device, with the same
// words, naming the node.
struct BadInput {
  const char* name;
  const char* op;
  std::vector<Tensor> inputs;
  std::function<Output(const Scope&, const std::vector<Output>&)> build;
  std::vector<std::string> words;
};

std::vector<BadInput> BadInputs() {
  const Tensor x23(DType::kF32, Shape{2, 3}), x32(DType::kF32, Shape{3, 2});
  const Tensor v4(DType::kF32, Shape{4});
  Tensor labels(DType::kI32, Shape{3});
  for (int i = 0; i < 3; ++i) labels.data<int32_t>()[i] = 0;
  return {
      {"BiasAddTooLong",
       "BiasAdd",
       {x23, v4},
       [](const Scope& s, const std::vector<Output>& in) { return ops::BiasAdd(s, in[0], in[1]); },
       {"bias f32[4]", "last dimension", "input f32[2,3]"}},
      {"AddNShapes",
       "AddN",
       {x23, x32},
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::AddN(s, {in[0], in[1]});
       },
       {"input 1 is f32[3,2]", "input 0 is f32[2,3]"}},
      {"ReluGradShapes",
       "ReluGrad",
       {x23, x32},
       [](const Scope& s, const std::vector<Output>& in) { return ops::ReluGrad(s, in[0], in[1]); },
       {"gradient f32[2,3]", "differs from input f32[3,2]"}},
      {"MatMulInner",
       "MatMul",
       {x23, x23},
       [](const Scope& s, const std::vector<Output>& in) { return ops::MatMul(s, in[0], in[1]); },
       {"inner dimensions", "[2,3] x [2,3]"}},
      {"CrossEntropyLabels",
       "SparseSoftmaxCrossEntropyWithLogits",
       {x23, labels},
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::SparseSoftmaxCrossEntropyWithLogits(s, in[0], in[1]).loss;
       },
       {"logits [2,3]", "labels [3]"}},
  };
}

class BadInputConformanceTest : public ::testing::TestWithParam<std::string> {};

// The refusal of `b` on `type`: its status.
Status RunBad(const BadInput& b, const std::string& type) {
  Scope root = Scope::NewRootScope();
  std::vector<Output> in;
  Session::Feeds feeds;
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    Shape unknown(std::vector<int64_t>(b.inputs[i].shape().rank(), -1));
    in.push_back(ops::Placeholder(root.WithOpName(name), b.inputs[i].dtype(), unknown));
    feeds.push_back({name, b.inputs[i]});
  }
  Output out = b.build(root.WithOpName("bad"), in);
  RETURN_IF_ERROR(root.status());
  ASSIGN_OR_RETURN(auto session, Session::Create(root, OptionsFor(type)));
  return session->Run(feeds, {out.name()}).status();
}

TEST_P(BadInputConformanceTest, AKernelRefusesBadInputsAlikeOnEveryDevice) {
  for (const BadInput& b : BadInputs()) {
    if (KernelRegistry::Global().Find(b.op, GetParam()) == nullptr) continue;
    Status got = RunBad(b, GetParam());
    EXPECT_EQ(got.code(), StatusCode::kInvalidArgument) << b.name << ": " << got.ToString();
    std::vector<std::string> words = b.words;
    words.push_back("bad");  // the node
    EXPECT_TRUE(testing::MessageHas(got, words)) << b.name << ": " << got.ToString();
    if (GetParam() != kReferenceType) {
      // The CPU's words, but for the device's name.
      Status want = RunBad(b, kReferenceType);
      std::string text = got.message();
      const std::string device = "device:" + GetParam() + ":";
      for (size_t at = text.find(device); at != std::string::npos; at = text.find(device, at)) {
        text.replace(at, device.size(), "device:CPU:");
      }
      EXPECT_EQ(text, want.message()) << b.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, BadInputConformanceTest,
                         ::testing::ValuesIn(testing::DeviceTypesUnderTest()));

// An op cannot be half-added: each one with a kernel has a case or a reason for having none.
TEST(OpConformanceCoverageTest, EveryKernelHasACaseOrAReason) {
  std::set<std::string> with_case;
  for (const auto& c : AllOpCases()) with_case.insert(c.op);
  const auto& reasons = NotCoveredOps();
  for (const auto& op : OpRegistry::Global().OpNames()) {
    std::vector<std::string> types = KernelRegistry::Global().DeviceTypesFor(op);
    if (types.empty()) continue;
    std::string list;
    for (const auto& t : types) list += fmt::format("{}{}", list.empty() ? "" : ", ", t);
    bool has_case = with_case.count(op) > 0, has_reason = reasons.count(op) > 0;
    EXPECT_TRUE(has_case || has_reason)
        << "op " << op << " has kernels for " << list
        << " but no conformance case (op_cases.h) and no reason in NotCoveredOps()";
    EXPECT_FALSE(has_case && has_reason)
        << "op " << op << " has cases: drop its NotCoveredOps entry";
    EXPECT_TRUE(has_reason || KernelRegistry::Global().Find(op, kReferenceType) != nullptr)
        << "op " << op << " has kernels for " << list << " but none for the CPU, the reference";
  }
  for (const auto& [op, why] : reasons) {
    EXPECT_FALSE(why.empty()) << op;
    EXPECT_FALSE(KernelRegistry::Global().DeviceTypesFor(op).empty())
        << "NotCoveredOps lists " << op << ", which has no kernel";
  }
  for (const auto& op : with_case) {
    EXPECT_NE(KernelRegistry::Global().Find(op, kReferenceType), nullptr)
        << "cases of " << op << " have no CPU kernel to hold other devices to";
  }
}

// NotOnDevice() lists, for every device type of this binary, exactly the ops with CPU cases
// that the type has no kernel for: printed here, so a backend's run says what it does not cover.
TEST(OpConformanceCoverageTest, DeviceGapsAreListedAndReal) {
  ASSERT_TRUE(DeviceFactory::Global().RegisterKernels().ok());
  std::set<std::string> with_case;
  for (const auto& c : AllOpCases()) with_case.insert(c.op);
  for (const auto& type : testing::DeviceTypesUnderTest()) {
    if (type == kReferenceType) continue;
    auto listed = NotOnDevice().find(type);
    std::string gaps;
    for (const auto& op : with_case) {
      const bool has_kernel = KernelRegistry::Global().Find(op, type) != nullptr;
      const bool is_listed = listed != NotOnDevice().end() && listed->second.count(op) > 0;
      EXPECT_FALSE(has_kernel && is_listed)
          << type << " has a kernel for " << op << ": drop its NotOnDevice entry";
      if (!has_kernel)
        gaps +=
            fmt::format("\n  {}: {}", op, is_listed ? listed->second.at(op) : "(NO REASON GIVEN)");
    }
    std::cout << type << " lacks kernels for:" << (gaps.empty() ? " nothing" : gaps) << "\n";
  }
}

// ---- Op properties (graph/op_def.h) ----

// `t` with its elements in reverse order (same dtype and shape).
Tensor Reversed(const Tensor& t) {
  Tensor out(t.dtype(), t.shape());
  const size_t size = DTypeSize(t.dtype());
  const auto* in = static_cast<const char*>(t.raw_data());
  auto* o = static_cast<char*>(out.raw_data());
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * size, in + (n - 1 - i) * size, size);
  return out;
}

// What the passes trust an op's definition to say is held to what its CPU kernel computes, on
// every conformance case it applies to: a commutative op's inputs 0 and 1 trade places, an
// element-wise op's inputs reversed reverse its output. A property no case can check fails.
TEST(OpPropertiesTest, DeclaredPropertiesHoldOnTheCpuKernels) {
  std::map<std::string, int> commutative_checked, elementwise_checked;
  for (const OpCase& c : AllOpCases()) {
    const OpDef* def = OpRegistry::Global().Find(c.op);
    ASSERT_NE(def, nullptr) << c.op;
    if (KernelRegistry::Global().Find(c.op, kReferenceType) == nullptr) continue;
    auto want = RunForward(c, kReferenceType);
    ASSERT_TRUE(want.ok()) << c.name << ": " << want.status().ToString();
    if (def->commutative && c.inputs.size() == 2 && c.inputs[0].dtype() == c.inputs[1].dtype()) {
      OpCase swapped = c;
      std::swap(swapped.inputs[0], swapped.inputs[1]);
      auto got = RunForward(swapped, kReferenceType);
      ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().ToString();
      ExpectOutputsClose(*got, *want, c.tolerance, c.name + " with its inputs swapped");
      commutative_checked[c.op]++;
    }
    bool same_shapes = !want->empty();
    for (const Tensor& in : c.inputs) same_shapes = same_shapes && in.shape() == (*want)[0].shape();
    if (def->elementwise && same_shapes && want->size() == 1) {
      OpCase reversed = c;
      for (Tensor& in : reversed.inputs) in = Reversed(in);
      auto got = RunForward(reversed, kReferenceType);
      ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().ToString();
      ExpectOutputsClose(*got, {Reversed((*want)[0])}, c.tolerance,
                         c.name + " with its inputs reversed");
      elementwise_checked[c.op]++;
    }
  }
  for (const auto& op : OpRegistry::Global().OpNames()) {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (KernelRegistry::Global().Find(op, kReferenceType) == nullptr) continue;
    if (def->commutative) {
      EXPECT_GT(commutative_checked[op], 0) << op << ": commutative, unchecked";
    }
    if (def->elementwise) {
      EXPECT_GT(elementwise_checked[op], 0) << op << ": element-wise, unchecked";
    }
  }
}

// The fusion rewrite's names, and the roles, point at ops that exist and take what they say.
TEST(OpPropertiesTest, FusionTraitsNameRegisteredOps) {
  int heads = 0;
  for (const auto& op : OpRegistry::Global().OpNames()) {
    const OpDef* def = OpRegistry::Global().Find(op);
    const OpFusion& f = def->fusion;
    if (f.kind != OpFusion::Kind::kNone) {
      ++heads;
      EXPECT_NE(OpRegistry::Global().Find(f.fused_op), nullptr) << op << " -> " << f.fused_op;
    }
    if (f.kind == OpFusion::Kind::kArgmax) {
      EXPECT_NE(OpRegistry::Global().Find(f.fused_partner), nullptr) << op;
    }
    if (f.kind == OpFusion::Kind::kAbsorbGradient) {
      EXPECT_GE(f.gradient_input, 0) << op;
      EXPECT_LT(f.gradient_input, static_cast<int>(def->inputs.size())) << op;
    }
    if (!def->gradient_of.empty()) {
      EXPECT_NE(OpRegistry::Global().Find(def->gradient_of), nullptr) << op;
    }
    if (f.kind == OpFusion::Kind::kAccumulate) {
      EXPECT_TRUE(def->commutative) << op << ": either input may be the product";
    }
    if (def->row_wise_update) {
      EXPECT_TRUE(def->stateful) << op;
    }
  }
  EXPECT_EQ(heads, 5);  // MatMul, Conv2D, MaxPool, ApplySGD, Add
  EXPECT_EQ(OpRegistry::Global().Find("Placeholder")->role, OpRole::kPlaceholder);
  EXPECT_EQ(OpRegistry::Global().Find("Variable")->role, OpRole::kVariable);
  EXPECT_EQ(OpRegistry::Global().Find("_Send")->role, OpRole::kSend);
  EXPECT_EQ(OpRegistry::Global().Find("_Recv")->role, OpRole::kRecv);
}

}  // namespace
}  // namespace dflow::conformance
