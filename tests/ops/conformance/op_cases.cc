#include "op_cases.h"

#include <fmt/format.h>

#include <cctype>
#include <set>

#include "ops/register.h"

namespace dflow::conformance {
namespace {

std::string ShapeTag(const Shape& s) {
  if (s.rank() == 0) return "s";
  std::string out;
  for (int d = 0; d < s.rank(); ++d) out += fmt::format("{}{}", d ? "x" : "", s[d]);
  return out;
}

// "Add_f32_3x1x5_4x5_tag": the op, the first input's dtype, the input shapes and the tag.
std::string CaseName(const OpCase& c) {
  std::string name = c.op;
  if (!c.inputs.empty()) name += fmt::format("_{}", DTypeName(c.inputs[0].dtype()));
  for (const auto& t : c.inputs) name += fmt::format("_{}", ShapeTag(t.shape()));
  if (!c.tag.empty()) name += fmt::format("_{}", c.tag);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

}  // namespace

std::function<CaseGraph(const Scope&, const std::vector<Output>&)> One(SingleBuild build) {
  return [build = std::move(build)](const Scope& s, const std::vector<Output>& in) {
    return CaseGraph{{build(s, in)}, {}};
  };
}

std::function<std::vector<Tensor>(const std::vector<Tensor>&)> One(SingleReference ref) {
  return [ref = std::move(ref)](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ref(in)};
  };
}

const std::vector<OpCase>& AllOpCases() {
  static const std::vector<OpCase>* cases = [] {
    ops::RegisterStandardOps();
    auto* all = new std::vector<OpCase>;
    CaseRng rng(20240611);
    AddElementwiseCases(rng, *all);
    AddMathCases(rng, *all);
    AddArrayCases(rng, *all);
    AddNnCases(rng, *all);
    AddStateCases(rng, *all);
    AddIndexCases(rng, *all);
    AddShapeCases(rng, *all);
    CaseRng random_shapes(20261127);
    AddRandomShapeCases(random_shapes, *all);
    std::set<std::string> seen;
    for (auto& c : *all) {
      std::string base = CaseName(c);
      c.name = base;
      for (int n = 2; !seen.insert(c.name).second; ++n) c.name = fmt::format("{}_{}", base, n);
    }
    return all;
  }();
  return *cases;
}

const std::map<std::string, std::string>& NotCoveredOps() {
  static const std::map<std::string, std::string> kNotCovered = {
      {"NoOp",
       "no inputs or outputs, nothing to compare; every run with a grouping target executes it "
       "(runtime_tests)"},
      {"RandomUniform",
       "values come from the device's generator, not a loop: distribution and seeding tests in "
       "ops_tests"},
      {"RandomNormal",
       "values come from the device's generator, not a loop: distribution and seeding tests in "
       "ops_tests"},
      {"Dropout",
       "the mask comes from the device's generator: DropoutTest (rate, scaling, replay, gradient "
       "is the mask) in ops_tests"},
      {"Empty",
       "its contents are unspecified; the WriteRows chain cases fill one row by row, and the "
       "all-reduce tests (ops_tests) compare what such chains assemble"},
      {"UniformLike",
       "values from NumPy's MT19937 stream, not a loop: checked against NumPy's documented "
       "draws for seed 0 (InitializerTest.UniformLikeIsNumPysStream in ops_tests)"},
      {"ResizeGrad",
       "Resize's gradient: the Resize cases check it against finite differences of Resize"},
      {"_Send",
       "moves tensors between devices through a rendezvous: the rendezvous conformance suite "
       "and the multi-device tests in runtime_tests"},
      {"_Recv",
       "moves tensors between devices through a rendezvous: the rendezvous conformance suite "
       "and the multi-device tests in runtime_tests"},
  };
  return kNotCovered;
}

const std::map<std::string, std::map<std::string, std::string>>& NotOnDevice() {
  const std::string kArray =
      "array manipulation has no GPU kernel yet: graphs that need it on a GPU are refused naming "
      "the node (the examples, ResNet-50 and the MLP/CNN steps do not)";
  const std::string kIndex =
      "the indexing ops have no GPU kernel yet: they come with imported ONNX models (losses, "
      "embeddings), which run on the CPU; a graph that needs one on a GPU is refused naming "
      "the node";
  const std::string kHostShape =
      "reads its shape operands on the host: CPU only (the shapes of a model with dimensions "
      "known at run time are computed there)";
  const std::string kFused =
      "a CPU-only fusion: the fusion rewrite forms it only where the CPU kernel exists; on the "
      "GPU the unfused ops run";
  const std::string kBlocked =
      "the CPU's blocked channel layout (rewrite/channel_blocks.h): the session forms it only on "
      "a device type that names a channel block; GPU convolutions keep NCHW";
  static const std::map<std::string, std::map<std::string, std::string>> kGaps = {
      {"GPU",
       {
           {"ArgMax",
            "no GPU kernel yet: the examples count accuracy on the host from fetched logits"},
           {"CheckNumerics",
            "no GPU kernel yet: it would have to read the tensor back to the host every step"},
           {"Concat", kArray},
           {"Slice", kArray},
           {"Split", kArray},
           {"Pad", kArray},
           {"Transpose", kArray},
           {"OneHot", kArray},
           {"Gather", kIndex},
           {"GatherGrad", kIndex},
           {"GatherElements", kIndex},
           {"ScatterElements", kIndex},
           {"Shape", kHostShape},
           {"ReshapeTo", kHostShape},
           {"Range", kHostShape},
           {"AxesShape", kHostShape},
           {"UniformLike",
            "draws NumPy's stream on the host: CPU only (imported training-mode "
            "Dropout)"},
           {"Resize",
            "reads its scales and sizes on the host: CPU only for now (ONNX models "
            "feed them as tensors)"},
           {"ResizeGrad", "Resize's gradient: CPU only, as Resize"},
           {"ReduceSumAxes",
            "reads its axes on the host: CPU only (ONNX's ReduceSum takes them as a tensor)"},
           {"CumSum", "reads its axis on the host: CPU only (ONNX models feed it as a tensor)"},
           {"ReduceProd", "no GPU kernel yet: the GPU reductions sum, average and take maxima"},
           {"WriteRows",
            "the row-by-row assembly of the all-reduce and parameter servers runs on host memory"},
           {"_WriteRowsSum",
            "the row-by-row assembly of the all-reduce and parameter servers runs on host memory"},
           {"_MatMulApplySGD", kFused},
           {"_MatMulAdd", kFused},
           {"_MaxPoolWithArgmax", kFused},
           {"_LayerNorm", kFused},
           {"_ScaledBatchMatMul", kFused},
           {"_Attention", kFused},
           {"_BlockedConv2D", kBlocked},
           {"_BlockedConvDw", kBlocked},
           {"_BlockedMaxPool", kBlocked},
           {"_BlockedAvgPool", kBlocked},
           {"_BlockChannels", kBlocked},
           {"_UnblockChannels", kBlocked},
           {"_MaxPoolGradWithArgmax", kFused},
       }},
  };
  return kGaps;
}

}  // namespace dflow::conformance
