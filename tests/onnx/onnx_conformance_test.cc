// The ONNX backend node tests (Debian's libonnx-testdata: each case a model.onnx with
// test_data_set_0/input_N.pb and output_N.pb) imported and run on dflow's CPU, the outputs
// compared with the expected ones at the ONNX runner's tolerances (rtol 1e-3, atol 1e-7). Prints
// how many cases pass, fail and are refused, the refusals grouped by reason; fails on any case
// that ran and gave a wrong answer or an error. Every case that passes on the CPU runs again on
// each other device type here (the GPU where there is one) when that type has a kernel for
// every node of it, held to the same expected outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "framework/device_factory.h"
#include "framework/kernel.h"
#include "onnx/onnx_import.h"
#include "runtime/session.h"

namespace dflow {
namespace {

namespace fs = std::filesystem;

constexpr char kNodeTests[] = "/usr/share/libonnx-testdata/data/node";

std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> v;
  switch (t.dtype()) {
    case DType::kF32:
      for (float x : t.ToVector<float>()) v.push_back(x);
      break;
    case DType::kF64:
      for (double x : t.ToVector<double>()) v.push_back(x);
      break;
    case DType::kI32:
      for (int32_t x : t.ToVector<int32_t>()) v.push_back(x);
      break;
    case DType::kI64:
      for (int64_t x : t.ToVector<int64_t>()) v.push_back(static_cast<double>(x));
      break;
    case DType::kU8:
      for (uint8_t x : t.ToVector<uint8_t>()) v.push_back(x);
      break;
    case DType::kBool:
      for (bool x : t.ToVector<bool>()) v.push_back(x ? 1 : 0);
      break;
    default:
      break;
  }
  return v;
}

// Empty when `got` matches `want`; otherwise what differs.
std::string Compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) {
    return fmt::format("dtype {} instead of {}", DTypeName(got.dtype()), DTypeName(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return fmt::format("shape {} instead of {}", got.shape(), want.shape());
  }
  if (got.dtype() == DType::kF16 || got.dtype() == DType::kBF16) return "";  // not compared yet
  std::vector<double> g = AsDoubles(got), w = AsDoubles(want);
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    if (!(std::fabs(g[i] - w[i]) <= 1e-7 + 1e-3 * std::fabs(w[i]))) {
      return fmt::format("element {}: {} instead of {}", i, g[i], w[i]);
    }
  }
  return "";
}

// The reason of a refusal without the model's path and node name: "Op: what".
std::string Reason(const Status& s) {
  std::string m(s.message());
  std::string op;
  if (size_t node = m.find("node '"); node != std::string::npos) {
    size_t open = m.find("' (", node);
    size_t colon = m.find("): ", open);
    if (open != std::string::npos && colon != std::string::npos) {
      op = m.substr(open + 3, m.find_first_of(",)", open + 3) - open - 3) + ": ";
      m = m.substr(colon + 3);
    }
  } else if (size_t quote = m.find("': ");
             m.rfind("model '", 0) == 0 && quote != std::string::npos) {
    m = m.substr(quote + 3);
  }
  if (m.size() > 90) m = m.substr(0, 90) + "...";
  return op + m;
}

TEST(OnnxConformanceTest, BackendNodeTests) {
  if (!fs::exists(kNodeTests)) GTEST_SKIP() << kNodeTests << " is missing (libonnx-testdata)";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kNodeTests)) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passed = 0, refused = 0;
  std::map<std::string, std::vector<std::string>> refusals;
  std::vector<std::string> failures;
  // The other device types with a device here, and per type: cases run, cases passed.
  std::vector<std::string> others;
  for (const std::string& type : DeviceFactory::Global().types()) {
    if (type != "CPU") others.push_back(type);
  }
  std::map<std::string, std::pair<int, int>> on_other;
  for (const fs::path& dir : cases) {
    const std::string name = dir.filename().string();
    const std::string model_path = (dir / "model.onnx").string();
    auto model = onnx::ImportModel(model_path);
    if (!model.ok()) {
      ++refused;
      refusals[Reason(model.status())].push_back(name);
      continue;
    }
    const fs::path data = dir / "test_data_set_0";
    Session::Feeds feeds;
    std::string problem;
    for (size_t i = 0; i < model->inputs.size() && problem.empty(); ++i) {
      auto t = onnx::ReadTensorFile((data / fmt::format("input_{}.pb", i)).string());
      if (!t.ok()) {
        problem = t.status().ToString();
      } else {
        feeds.emplace_back(model->inputs[i], std::move(*t));
      }
    }
    std::vector<Tensor> expected;
    for (size_t i = 0; i < model->outputs.size() && problem.empty(); ++i) {
      auto t = onnx::ReadTensorFile((data / fmt::format("output_{}.pb", i)).string());
      if (!t.ok()) {
        problem = t.status().ToString();
      } else {
        expected.push_back(std::move(*t));
      }
    }
    if (!problem.empty()) {  // the test data holds a dtype dflow lacks
      ++refused;
      refusals["test data: " + problem.substr(problem.find(": ") + 2)].push_back(name);
      continue;
    }
    auto session = Session::Create(model->graph);
    Result<std::vector<Tensor>> out = session.ok() ? (*session)->Run(feeds, model->outputs)
                                                   : Result<std::vector<Tensor>>(session.status());
    if (!out.ok()) {
      failures.push_back(name + ": " + out.status().ToString());
      continue;
    }
    for (size_t i = 0; i < expected.size() && problem.empty(); ++i) {
      std::string diff = Compare(out->at(i), expected[i]);
      if (!diff.empty()) problem = fmt::format("output {}: {}", i, diff);
    }
    if (!problem.empty()) {
      failures.push_back(name + ": " + problem);
      continue;
    }
    ++passed;
    for (const std::string& type : others) {
      bool has_kernels = true;
      for (int v = 0; v < model->graph.num_nodes() && has_kernels; ++v) {
        const auto types = KernelRegistry::Global().DeviceTypesFor(model->graph.node(v).op());
        has_kernels = std::find(types.begin(), types.end(), type) != types.end();
      }
      if (!has_kernels) continue;
      SessionOptions options;
      options.device = fmt::format("{}:0", type == "GPU" ? "gpu" : type);
      auto there = Session::Create(model->graph, options);
      Result<std::vector<Tensor>> got = there.ok() ? (*there)->Run(feeds, model->outputs)
                                                   : Result<std::vector<Tensor>>(there.status());
      std::string wrong = got.ok() ? "" : got.status().ToString();
      for (size_t i = 0; got.ok() && i < expected.size() && wrong.empty(); ++i) {
        std::string diff = Compare(got->at(i), expected[i]);
        if (!diff.empty()) wrong = fmt::format("output {}: {}", i, diff);
      }
      ++on_other[type].first;
      if (wrong.empty()) {
        ++on_other[type].second;
      } else {
        failures.push_back(fmt::format("{} on {}: {}", name, type, wrong));
      }
    }
  }
  std::printf("ONNX backend node tests: %zu cases, %d pass, %zu fail, %d refused\n", cases.size(),
              passed, failures.size(), refused);
  if (others.empty()) std::printf("  other device types: none here (the CPU only)\n");
  for (const std::string& type : others) {
    std::printf("  on %s: %d of the passing cases have every kernel there, %d pass\n", type.c_str(),
                on_other[type].first, on_other[type].second);
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> grouped(refusals.begin(),
                                                                        refusals.end());
  std::sort(grouped.begin(), grouped.end(),
            [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  for (const auto& [reason, names] : grouped) {
    std::printf("  refused %3zu: %s (%s%s)\n", names.size(), reason.c_str(), names[0].c_str(),
                names.size() > 1 ? ", ..." : "");
  }
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace dflow
