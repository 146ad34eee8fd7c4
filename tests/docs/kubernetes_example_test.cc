// The Kubernetes example of docs/launch.md keeps its form: tests/docs/check_kubernetes.py parses
// its YAML (PyYAML) and checks that the pieces fit (the headless Service selects the master's
// pod, ports and worker counts agree, the token is an owner-only Secret where both commands read
// it). The checker must also catch each kind of mistake, shown on altered copies.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tools/subprocess.h"

namespace dflow {
namespace {

const std::string kDoc = std::string(DFLOW_SOURCE_DIR) + "/docs/launch.md";
const std::string kChecker = std::string(DFLOW_SOURCE_DIR) + "/tests/docs/check_kubernetes.py";

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<tools::ProgramResult> Check(const std::string& path) {
  return tools::RunProgram({"python3", kChecker, path}, "", true);
}

TEST(KubernetesExampleTest, TheDocsExampleFits) {
  auto ran = Check(kDoc);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0) << ran->out;
  EXPECT_NE(ran->out.find("kubernetes example: ok (2 workers, rendezvous port 29500)"),
            std::string::npos)
      << ran->out;
}

TEST(KubernetesExampleTest, MistakesAreCaught) {
  const std::string doc = Read(kDoc);
  ASSERT_FALSE(doc.empty());
  struct Mistake {
    std::string from, to, named;
  };
  for (const Mistake& m : {
           Mistake{"completions: 2", "completions: 3", "completions 3"},
           Mistake{"value: dflow-master", "value: dflow-main", "MASTER_ADDR dflow-main"},
           Mistake{"defaultMode: 0400", "defaultMode: 0444", "lets others read it"},
           Mistake{"clusterIP: None ", "clusterIP: 10.0.0.1 ", "not headless"},
           Mistake{"        app: dflow-master", "        app: dflow", "does not select"},
       }) {
    const size_t at = doc.find(m.from);
    ASSERT_NE(at, std::string::npos) << m.from;
    std::string altered = doc;
    altered.replace(at, m.from.size(), m.to);
    const std::string path = ::testing::TempDir() + "/launch_altered.md";
    std::ofstream(path) << altered;
    auto ran = Check(path);
    ASSERT_TRUE(ran.ok()) << ran.status().ToString();
    EXPECT_EQ(ran->exit_code, 1) << m.to << ": " << ran->out;
    EXPECT_NE(ran->out.find(m.named), std::string::npos) << m.to << ": " << ran->out;
  }
}

}  // namespace
}  // namespace dflow
