// Several hosts simulated on this one: Linux network namespaces joined by veth pairs through a
// bridge, each worker in its own namespace with its own address, the master (this test) in the
// root namespace with one more veth. The link to host B is limited to 1 Gbit/s with tc's tbf
// qdisc. Needs root (CI runs as root); elsewhere every test skips, saying why. Everything made
// here is removed by the fixture, also when a test fails: deleting the namespaces deletes the
// bridge and every veth pair.
//
//   root (master, 10.213.N.1) --veth-- [ns S: bridge] --veth-- ns A (worker 0, 10.213.N.2)
//                                                    `--veth-- ns B (worker 1, 10.213.N.3)
//                                                               (1 Gbit/s both ways)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#include "distributed/test_mlp.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "status_matchers.h"
#include "tools/subprocess.h"
#include "transport/ucx/ucx_transport.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

constexpr char kNetnsToken[] = "netns-test-token";

// Runs `ip ARGS...`; the error names the command and quotes what it printed.
Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  auto ran = tools::RunProgram(args, "");
  std::string line;
  for (const auto& a : args) line += a + " ";
  if (!ran.ok()) return ran.status().WithPrefix(line + ": ");
  if (ran->exit_code != 0) return Internal("{}failed: {}", line, ran->err);
  return Status::OK();
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespace tests need root (CI runs as root)";
    // Two hosts share no memory, but namespaces of one machine do: keep UCX off shared memory
    // (here and in the workers, which inherit the environment) so every byte crosses the veths.
    setenv("UCX_MM_ERROR_HANDLING", "n", 1);
    const std::string p = std::to_string(getpid());
    s_ = "dfl" + p + "s";
    a_ = "dfl" + p + "a";
    b_ = "dfl" + p + "b";
    m_ = "dfl" + p + "m";
    // A subnet of its own (ctest runs these tests in parallel processes, each with its own
    // namespaces): 10.213.N.0/24 with N from the pid, the next one when N is in use here.
    for (int k = 0; k < 250 && subnet_.empty(); ++k) {
      std::string candidate = fmt::format("10.213.{}", 1 + (getpid() + k) % 250);
      auto used = tools::RunProgram(
          {"ip", "-o", "addr", "show", "to", fmt::format("{}.0/24", candidate)}, "");
      if (!used.ok()) GTEST_SKIP() << "no `ip` program: " << used.status().ToString();
      if (used->out.empty()) subnet_ = candidate;
    }
    if (subnet_.empty()) GTEST_SKIP() << "every 10.213.N.0/24 is in use on this machine";
    Status made = Make();
    if (!made.ok()) {
      TearDown();
      GTEST_SKIP() << "cannot make network namespaces here: " << made.ToString();
    }
    auto token = WriteTokenFile(::testing::TempDir(), kNetnsToken);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    token_file_ = *token;
  }

  void TearDown() override {
    workers_.clear();  // before their namespaces go
    for (const auto& ns : {a_, b_, s_}) {
      if (!ns.empty()) (void)Ip({"netns", "del", ns});
    }
    if (!m_.empty()) (void)Ip({"link", "del", m_});  // gone with its peer already, normally
    if (!token_file_.empty()) std::remove(token_file_.c_str());
  }

  Status Make() {
    for (const auto& ns : {s_, a_, b_}) RETURN_IF_ERROR(Ip({"netns", "add", ns}));
    RETURN_IF_ERROR(Ip({"-n", s_, "link", "add", "br0", "type", "bridge"}));
    RETURN_IF_ERROR(Ip({"-n", s_, "link", "set", "br0", "up"}));
    // One veth pair per host: "h" in the host's namespace, "p" a port of the bridge.
    struct Host {
      std::string ns, h, p, address;
    };
    const std::string p = std::to_string(getpid());
    for (const Host& h :
         {Host{a_, "h" + p + "a", "p" + p + "a", A()}, Host{b_, "h" + p + "b", "p" + p + "b", B()},
          Host{"", m_, "p" + p + "m", subnet_ + ".1"}}) {
      RETURN_IF_ERROR(Ip({"link", "add", h.h, "type", "veth", "peer", "name", h.p}));
      RETURN_IF_ERROR(Ip({"link", "set", h.p, "netns", s_}));
      RETURN_IF_ERROR(Ip({"-n", s_, "link", "set", h.p, "master", "br0"}));
      RETURN_IF_ERROR(Ip({"-n", s_, "link", "set", h.p, "up"}));
      std::vector<std::string> in_ns;
      if (!h.ns.empty()) {
        RETURN_IF_ERROR(Ip({"link", "set", h.h, "netns", h.ns}));
        in_ns = {"-n", h.ns};
        auto lo = in_ns;
        lo.insert(lo.end(), {"link", "set", "lo", "up"});
        RETURN_IF_ERROR(Ip(lo));
      }
      auto addr = in_ns, up = in_ns;
      addr.insert(addr.end(), {"addr", "add", h.address + "/24", "dev", h.h});
      up.insert(up.end(), {"link", "set", h.h, "up"});
      RETURN_IF_ERROR(Ip(addr));
      RETURN_IF_ERROR(Ip(up));
    }
    b_link_ = "h" + p + "b";
    b_port_ = "p" + p + "b";
    // The kernel reports a new link's carrier up to a second later; until then connections to
    // it fail. Wait for every end, the ports and the bridge.
    std::vector<std::pair<std::string, std::string>> links = {
        {a_, "h" + p + "a"}, {b_, "h" + p + "b"}, {"", m_},   {s_, "p" + p + "a"},
        {s_, "p" + p + "b"}, {s_, "p" + p + "m"}, {s_, "br0"}};
    for (const auto& [ns, dev] : links) RETURN_IF_ERROR(WaitUp(ns, dev));
    return Status::OK();
  }

  // Polls `ip -o link show` until `dev` (in namespace `ns`, or the root one) is "state UP".
  static Status WaitUp(const std::string& ns, const std::string& dev) {
    std::vector<std::string> args = {"ip", "-o", "link", "show", "dev", dev};
    if (!ns.empty()) args.insert(args.begin() + 1, {"-n", ns});
    for (int i = 0; i < 100; ++i) {
      auto ran = tools::RunProgram(args, "");
      if (!ran.ok()) return ran.status();
      if (ran->out.find("state UP") != std::string::npos) return Status::OK();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Internal("link {} {} did not come up within 5 s", ns, dev);
  }

  // Host B's link limited to `rate` (tc syntax, "1gbit") both ways.
  Status LimitB(const std::string& rate) {
    for (const auto& [ns, dev] : {std::pair{b_, b_link_}, std::pair{s_, b_port_}}) {
      auto ran =
          tools::RunProgram({"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                             "tbf", "rate", rate, "burst", "256kb", "latency", "20ms"},
                            "");
      if (!ran.ok()) return ran.status();
      if (ran->exit_code != 0) return Internal("tc on {} failed: {}", dev, ran->err);
    }
    return Status::OK();
  }

  // A worker in host `ns` listening on `address`.
  Result<LocalWorker*> StartWorker(const std::string& ns, const std::string& address,
                                   const std::string& devices) {
    ASSIGN_OR_RETURN(auto w, LocalWorker::Start(DFLOW_WORKER_BINARY,
                                                {"--devices", devices, "--token-file", token_file_,
                                                 "--threads", "1", "--release-after", "2000"},
                                                address + ":0", {"ip", "netns", "exec", ns}));
    workers_.push_back(std::move(w));
    return workers_.back().get();
  }

  DistributedOptions Cluster() const {
    DistributedOptions o;
    for (const auto& w : workers_) o.cluster.jobs["worker"].push_back(w->address());
    o.token = kNetnsToken;
    return o;
  }

  std::string A() const { return subnet_ + ".2"; }  // host A's address
  std::string B() const { return subnet_ + ".3"; }  // host B's address

  std::string subnet_, s_, a_, b_, m_, b_link_, b_port_, token_file_;
  std::vector<std::unique_ptr<LocalWorker>> workers_;
};

TEST_F(NetnsTest, TwoHostsTrainTheMlpAsOneProcessDoesOverA1GbitLink) {
  ASSERT_TRUE(LimitB("1gbit").ok());
  ASSERT_TRUE(StartWorker(a_, A(), "cpu:0").ok());
  ASSERT_TRUE(StartWorker(b_, B(), "cpu:0").ok());
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0", 256);
  auto dist = DistributedSession::Create(model.root.graph(), {}, Cluster());
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  // The link to B was measured at about its limit (1 Gbit/s = 125 MB/s).
  ASSERT_EQ((*dist)->links().size(), 2u);
  for (const auto& l : (*dist)->links()) {
    std::printf("link %s -> %s: %.1f us, %.1f MB/s\n", l.from.c_str(), l.to.c_str(),
                l.latency_s * 1e6, l.bandwidth / 1e6);
    EXPECT_GT(l.bandwidth, 40e6) << l.from << " -> " << l.to;
    EXPECT_LT(l.bandwidth, 160e6) << l.from << " -> " << l.to;
  }
  Mlp local_model("", "", 256);
  auto local = Session::Create(local_model.root);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE((*dist)->Run({}, {}, model.init).ok());
  ASSERT_TRUE((*local)->Run({}, {}, local_model.init).ok());
  std::vector<double> times;
  for (int s = 0; s < 12; ++s) {
    auto feeds = MlpBatch(s, 64);
    auto start = std::chrono::steady_clock::now();
    auto d = (*dist)->Run(feeds, {model.loss.name()}, {model.step.name()});
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto l = (*local)->Run(feeds, {local_model.loss.name()}, {local_model.step.name()});
    ASSERT_TRUE(l.ok());
    EXPECT_NEAR((*d)[0].data<float>()[0], (*l)[0].data<float>()[0], 1e-5) << "step " << s;
  }
  std::sort(times.begin() + 2, times.end());
  std::printf("two hosts over 1 Gbit/s: step %.2f ms measured (median), %.2f ms predicted\n",
              times[7] * 1e3, (*dist)->placement().predicted_step_s * 1e3);
}

// Two chains of large element-wise steps, each fed once and fetched once: the placer, which
// knows the link to B carries 1 Gbit/s, keeps each chain on one host instead of splitting it
// (each hop of a chain across hosts would move 16 MiB).
TEST_F(NetnsTest, OverASlowLinkThePlacerKeepsChattyPartsOnOneHost) {
  ASSERT_TRUE(LimitB("1gbit").ok());
  ASSERT_TRUE(StartWorker(a_, A(), "cpu:0,cpu:1").ok());
  ASSERT_TRUE(StartWorker(b_, B(), "cpu:0,cpu:1").ok());
  Scope root = Scope::NewRootScope();
  std::vector<std::vector<std::string>> chains(2);
  std::vector<std::string> fetches;
  for (int c = 0; c < 2; ++c) {
    auto x =
        ops::Placeholder(root.WithOpName(fmt::format("x{}", c)), DType::kF32, Shape{2048, 2048});
    Output h = x;
    for (int k = 0; k < 8; ++k) {
      std::string name = fmt::format("c{}_{}", c, k);
      h = ops::Tanh(root.WithOpName(name), ops::Mul(root.WithOpName(name + "_m"), h, h));
      chains[c].insert(chains[c].end(), {name, name + "_m"});
    }
    fetches.push_back(ops::ReduceSum(root.WithOpName(fmt::format("sum{}", c)), h, {0, 1}).name());
  }
  auto dist = DistributedSession::Create(root.graph(), {}, Cluster());
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  const auto& placement = (*dist)->placement();
  const auto& set = (*dist)->device_set();
  const Graph& g = (*dist)->graph();
  for (int c = 0; c < 2; ++c) {
    std::set<std::string> tasks;
    for (const auto& name : chains[c]) {
      auto v = g.FindNode(name);
      ASSERT_TRUE(v.has_value()) << name;
      tasks.insert(TaskOfDevice(set.device(placement.device_of[*v]).canonical()).value());
    }
    EXPECT_EQ(tasks.size(), 1u) << "chain " << c << " spans " << tasks.size() << " hosts";
  }
  Tensor x(DType::kF32, Shape{2048, 2048});
  for (float& v : x.flat<float>()) v = 0.5f;
  auto start = std::chrono::steady_clock::now();
  auto out = (*dist)->Run({{"x0", x}, {"x1", x}}, fetches);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // Each element goes 0.5 -> tanh(0.25) -> ... the same for both chains: compare with a loop.
  float e = 0.5f;
  for (int k = 0; k < 8; ++k) e = std::tanh(e * e);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR((*out)[c].data<float>()[0], e * 2048 * 2048, 2048 * 2048 * 1e-5) << c;
  }
  // Later steps, without the first one's compiling; each still feeds 16 MiB to each host from
  // the master, and the prediction models the workers' devices and links, not the master's
  // feeds (over B's 1 Gbit/s link those alone take about 134 ms).
  std::vector<double> later;
  for (int s = 0; s < 3; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE((*dist)->Run({{"x0", x}, {"x1", x}}, fetches).ok());
    later.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(later.begin(), later.end());
  std::printf(
      "chains over two hosts: first step %.1f ms, later steps %.1f ms (median of 3) measured, "
      "%.1f ms predicted; the master's 16 MiB feed to B over 1 Gbit/s (%.1f ms) is not in the "
      "prediction\n",
      took * 1e3, later[1] * 1e3, placement.predicted_step_s * 1e3, 16.0 * (1 << 20) / 125e6 * 1e3);
}

// A long step across both hosts; B's link goes down in the middle: the master's Run fails
// within two seconds with Unavailable naming B's task, and A keeps serving.
TEST_F(NetnsTest, ALinkSetDownMidStepFailsTheStepWithinTwoSeconds) {
  ASSERT_TRUE(StartWorker(a_, A(), "cpu:0").ok());
  ASSERT_TRUE(StartWorker(b_, B(), "cpu:0").ok());
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1024, 1024});
  Output h = x;
  Scope on_b = root.WithDevice("/job:worker/task:1/device:CPU:0");
  for (int k = 0; k < 400; ++k) h = ops::Tanh(on_b, ops::MatMul(on_b, h, x));  // seconds of work
  auto out = ops::Neg(root.WithOpName("out").WithDevice("/job:worker/task:0/device:CPU:0"), h);
  auto dist = DistributedSession::Create(root.graph(), {}, Cluster());
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  Tensor xv(DType::kF32, Shape{1024, 1024});
  for (float& v : xv.flat<float>()) v = 1e-3f;
  std::chrono::steady_clock::time_point down;
  std::thread cut([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    down = std::chrono::steady_clock::now();
    EXPECT_TRUE(Ip({"-n", b_, "link", "set", b_link_, "down"}).ok());
  });
  auto r = (*dist)->Run({{"x", xv}}, {out.name()});
  auto failed = std::chrono::steady_clock::now();
  cut.join();
  ASSERT_FALSE(r.ok()) << "the step finished although B's link went down";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_TRUE(MessageHas(r.status(), {"/job:worker/task:1"})) << r.status().ToString();
  double after = std::chrono::duration<double>(failed - down).count();
  std::printf("the step failed %.0f ms after the link went down: %s\n", after * 1e3,
              r.status().ToString().c_str());
  EXPECT_LT(after, 2.0);
  // Worker A still serves a new session.
  Scope again = Scope::NewRootScope();
  auto c = ops::Const(again.WithOpName("c").WithDevice("/job:worker/task:0/device:CPU:0"), 3.0f);
  DistributedOptions only_a;
  only_a.cluster.jobs["worker"].push_back(workers_[0]->address());
  only_a.token = kNetnsToken;
  auto fresh = DistributedSession::Create(again.graph(), {}, only_a);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  auto three = (*fresh)->Run({}, {c.name()});
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ((*three)[0].data<float>()[0], 3.0f);
}

}  // namespace
}  // namespace dflow::distributed
