// Issue 31: one vocabulary for every tool and example. Each is run as a user would: --help exits
// 0 and shows defaults, --version names the program and the version, a bad value or an unknown
// flag exits 2 with one line saying what is wrong in words, and the retired spellings (--device,
// --max-steps, --device-memory-mib) are gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dflow/version.h"
#include "tools/run_tool.h"

namespace dflow {
namespace {

using testing::Ran;

struct Program {
  std::string name;
  std::vector<std::string> base;  // arguments it needs before any other (a graph file)
  std::string default_shown;      // a text of --help that shows a default value
  std::vector<std::string> bad;   // a value out of range
  std::string bad_words;          // what the error says
};

std::vector<Program> Programs() {
  const std::string graph = ::testing::TempDir() + "/cli_test_missing.dfg";
  std::vector<Program> all = {
      {"dflow-run",
       {graph, "--fetch", "y"},
       "INT:POSITIVE=1",
       {"--steps", "0"},
       "--steps: must be at least 1, not 0"},
      {"dflow-dot",
       {graph},
       "=cost",
       {"--assume-batch", "-3"},
       "--assume-batch: must be at least 1, not -3"},
  };
#ifdef DFLOW_WITH_WORKER_TOOLS
  all.push_back({"dflow-worker",
                 {"--token-file", graph},
                 "=cpu:0",
                 {"--threads", "-1"},
                 "--threads: must be at least 0, not -1"});
  all.push_back({"dflow-launch",
                 {"--token-file", graph},
                 "=10",
                 {"--max-restarts", "x"},
                 "--max-restarts: 'x' is not a whole number"});
#endif
#ifdef DFLOW_WITH_EXAMPLES
  for (const char* example :
       {"fashion_mnist_mlp", "fashion_mnist_cnn", "data_parallel_mlp", "ps_mlp", "resnet50"}) {
    all.push_back({example,
                   {},
                   "INT:POSITIVE=128",
                   {"--batch-size", "0"},
                   "--batch-size: must be at least 1, not 0"});
  }
  all.push_back({"model_parallel_mlp",
                 {},
                 "=cpu:0,cpu:1",
                 {"--lr", "-1"},
                 "--lr: must be greater than 0, not -1"});
  all.push_back({"hello", {}, "", {"--save"}, "--save: 1 required TEXT missing"});
#endif
  return all;
}

Ran RunProgram(const Program& p, std::vector<std::string> args) {
  std::vector<std::string> all = p.base;
  all.insert(all.end(), args.begin(), args.end());
  return testing::RunBinary(std::string(DFLOW_BIN_DIR) + "/" + p.name, all);
}

Ran Bin(const std::string& name, const std::vector<std::string>& args) {
  return testing::RunBinary(std::string(DFLOW_BIN_DIR) + "/" + name, args);
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(CliTest, HelpAndVersion) {
  for (const Program& p : Programs()) {
    Ran help = Bin(p.name, {"--help"});
    EXPECT_EQ(help.code, 0) << p.name << "\n" << help.output;
    EXPECT_NE(help.output.find("--version"), std::string::npos) << p.name;
    if (!p.default_shown.empty()) {
      EXPECT_NE(help.output.find(p.default_shown), std::string::npos)
          << p.name << ": no '" << p.default_shown << "' in\n"
          << help.output;
    }
    Ran version = Bin(p.name, {"--version"});
    EXPECT_EQ(version.code, 0) << p.name;
    EXPECT_EQ(version.output, p.name + " " + DFLOW_VERSION_STRING + "\n");
  }
}

TEST(CliTest, UsageErrorsExit2WithOneLineInWords) {
  for (const Program& p : Programs()) {
    Ran bad = RunProgram(p, p.bad);
    EXPECT_EQ(bad.code, 2) << p.name << "\n" << bad.output;
    EXPECT_EQ(Lines(bad.output), 1) << p.name << "\n" << bad.output;
    EXPECT_EQ(bad.output.rfind("error: InvalidArgument: ", 0), 0u) << p.name << "\n" << bad.output;
    EXPECT_NE(bad.output.find(p.bad_words), std::string::npos) << p.name << "\n" << bad.output;
    // No bound printed as the limits of a type (the 309 digits of a double's maximum).
    EXPECT_EQ(bad.output.find("1797693"), std::string::npos) << bad.output;

    Ran unknown = RunProgram(p, {"--no-such-flag"});
    EXPECT_EQ(unknown.code, 2) << p.name << "\n" << unknown.output;
    EXPECT_EQ(Lines(unknown.output), 1) << p.name << "\n" << unknown.output;
    EXPECT_NE(unknown.output.find("--no-such-flag"), std::string::npos) << unknown.output;

    // The retired spellings: --devices, --steps / --steps-per-epoch and --memory-limit now.
    for (const auto& old : std::vector<std::vector<std::string>>{
             {"--device", "cpu:0"}, {"--max-steps", "3"}, {"--device-memory-mib", "8"}}) {
      Ran r = RunProgram(p, old);
      EXPECT_EQ(r.code, 2) << p.name << " " << old[0] << "\n" << r.output;
    }
  }
}

#ifdef DFLOW_WITH_EXAMPLES
// --devices is taken as dflow-run takes it, and a device this machine lacks is a usage error
// that names it.
TEST(CliTest, ExamplesTakeDevicesAsTheToolsDo) {
  for (const char* example : {"fashion_mnist_mlp", "resnet50", "model_parallel_mlp"}) {
    Ran r = Bin(example, {"--devices", "cpu:0,cpu:2"});
    EXPECT_EQ(r.code, 2) << example << "\n" << r.output;
    EXPECT_NE(r.output.find("--devices 'cpu:0,cpu:2'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("cpu:1 is missing"), std::string::npos) << r.output;
  }
  Ran two = Bin("resnet50", {"--devices", "cpu:0,cpu:1"});
  EXPECT_EQ(two.code, 2) << two.output;
  EXPECT_NE(two.output.find("runs on one device"), std::string::npos) << two.output;
  Ran ps = Bin("ps_mlp", {"--local-workers", "2", "--replicas", "2"});
  EXPECT_EQ(ps.code, 2) << ps.output;
  EXPECT_NE(ps.output.find("--local-workers 2: --replicas 2 and --parameter-servers 1 need 3"),
            std::string::npos)
      << ps.output;
}
#endif

}  // namespace
}  // namespace dflow
