// Issue 31: every shell session the docs show runs as written. Each ```console block of
// README.md and docs/*.md is a session: "$ " starts a command (a trailing "\" continues it),
// the lines after it are what it prints. The sessions of one file run in order in a scratch
// folder where `build` is this build and `tests` and `bench` the source's, as a user runs them from
// the source folder. A command must exit 0, unless a line it is shown printing starts with
// "error:" (then it must fail and print that line). Every line shown is checked to be
// printed exactly, except lines holding "..." (timings, losses). A command ending in "&" runs in
// the background; the session waits (at most 30 s) for the first line shown for it, as a user
// waits for a worker's "listening on" line. Background commands are stopped when the file ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/subprocess.h"

namespace dflow {
namespace {

struct Command {
  int line = 0;      // of the "$ " line in the file
  std::string text;  // continuation lines joined
  bool background = false;
  std::vector<std::string> shown;  // the lines the doc shows it printing
};

std::vector<Command> Sessions(const std::string& path) {
  std::ifstream in(path);
  std::vector<Command> commands;
  std::string line;
  bool in_console = false, continuing = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!in_console) {
      in_console = line == "```console";
      continue;
    }
    if (line.rfind("```", 0) == 0) {
      in_console = continuing = false;
      continue;
    }
    if (continuing) {
      commands.back().text += "\n" + line;
      continuing = !line.empty() && line.back() == '\\';
    } else if (line.rfind("$ ", 0) == 0) {
      commands.push_back({n, line.substr(2)});
      continuing = line.back() == '\\';
    } else if (!commands.empty()) {
      commands.back().shown.push_back(line);
    }
  }
  for (Command& c : commands) {
    std::string& t = c.text;
    while (!t.empty() && t.back() == ' ') t.pop_back();
    if (t.size() > 1 && t.back() == '&' && t[t.size() - 2] == ' ') {
      c.background = true;
      t.resize(t.size() - 2);
    }
  }
  return commands;
}

// A bash word holding `s` as it is.
std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The bash script that runs `commands` of `file` and checks them; it prints "DOCFAIL file:line:
// why" and the command's output, and exits 1, at the first that does not do as shown.
std::string Script(const std::string& file, const std::vector<Command>& commands) {
  std::ostringstream s;
  s << "set -u\n"
       "trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT\n"
       "fail() { echo \"DOCFAIL $1: $2\"; echo '--- it printed:'; cat \"$3\"; exit 1; }\n"
       "shown() {  # FILE LINE WHERE: LINE must be printed exactly\n"
       "  grep -qxF -- \"$2\" \"$1\" || fail \"$3\" \"this line was not printed: $2\" \"$1\"\n"
       "}\n";
  int n = 0;
  for (const Command& c : commands) {
    const std::string where = Quote(file + ":" + std::to_string(c.line));
    const std::string out = ".doc_out_" + std::to_string(++n);
    if (c.background) {
      s << "( " << c.text << "\n) > " << out << " 2>&1 &\n";
      s << "bg=$!\n";
      if (!c.shown.empty() && c.shown[0].find("...") == std::string::npos) {
        s << "for i in $(seq 300); do grep -qxF -- " << Quote(c.shown[0]) << " " << out
          << " && break; kill -0 $bg 2>/dev/null || fail " << where
          << " 'it exited before printing what is shown' " << out << "; sleep 0.1; done\n";
        s << "shown " << out << " " << Quote(c.shown[0]) << " " << where << "\n";
      }
      continue;
    }
    s << "{ " << c.text << "\n} > " << out << " 2>&1 < /dev/null\nrc=$?\n";
    const bool error = std::any_of(c.shown.begin(), c.shown.end(), [](const std::string& line) {
      return line.rfind("error:", 0) == 0;
    });
    if (error) {
      s << "[ $rc -ne 0 ] || fail " << where << " 'it succeeded; the doc shows an error' " << out
        << "\n";
    } else {
      s << "[ $rc -eq 0 ] || fail " << where << " \"it exited with status $rc\" " << out << "\n";
    }
    for (const std::string& line : c.shown) {
      if (line.find("...") != std::string::npos || line.empty()) continue;
      s << "shown " << out << " " << Quote(line) << " " << where << "\n";
    }
  }
  return s.str();
}

class DocSessionsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DocSessionsTest, RunAsWritten) {
  namespace fs = std::filesystem;
  const std::string file = GetParam();
  std::vector<Command> commands = Sessions(std::string(DFLOW_SOURCE_DIR) + "/" + file);
  if (commands.empty()) GTEST_SKIP() << file << " shows no shell session";
  std::string name = file;
  for (char& ch : name) ch = (ch == '/' || ch == '.') ? '_' : ch;
  const fs::path scratch = fs::path(::testing::TempDir()) / ("docs_" + name);
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  fs::create_directory_symlink(DFLOW_BUILD_DIR, scratch / "build");
  fs::create_directory_symlink(std::string(DFLOW_SOURCE_DIR) + "/tests", scratch / "tests");
  fs::create_directory_symlink(std::string(DFLOW_SOURCE_DIR) + "/bench", scratch / "bench");
  const fs::path script = scratch / ".doc_session.sh";
  std::ofstream(script) << Script(file, commands);
  auto ran = tools::RunProgram(
      {"bash", "-c", "cd " + Quote(scratch.string()) + " && bash " + Quote(script.string())}, "",
      /*merge_stderr=*/true);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0) << ran->out;
  if (ran->exit_code == 0) fs::remove_all(scratch);
}

std::vector<std::string> DocFiles() {
  std::vector<std::string> files = {"README.md"};
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(DFLOW_SOURCE_DIR) + "/docs")) {
    if (entry.path().extension() == ".md")
      files.push_back("docs/" + entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

INSTANTIATE_TEST_SUITE_P(Docs, DocSessionsTest, ::testing::ValuesIn(DocFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace dflow
