// The distributed runtime over the in-process transport (transport/inproc/): a master and its
// workers as objects of this process, every request and tensor crossing a Transport as between
// processes. The MLP trains across two workers to the one-process result, and the errors a
// cluster can give reach the master unchanged: what runs here runs over UCX too, since both
// transports keep one contract (tests/transport/transport_conformance_test.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "distributed/distributed_session.h"
#include "distributed/messages.h"
#include "distributed/test_mlp.h"
#include "distributed/worker_service.h"
#include "status_matchers.h"
#include "transport/transport.h"

namespace dflow::distributed {
namespace {

using test_mlp::Mlp;
using test_mlp::MlpBatch;
using testing::MessageHas;

constexpr char kInprocToken[] = "inproc-cluster-token";

// A worker: an in-process transport listening, and the service answering on it.
struct InprocWorker {
  std::unique_ptr<transport::Transport> transport;
  std::unique_ptr<WorkerService> service;
  explicit InprocWorker(int max_jobs = 16) {
    transport::TransportOptions o;
    o.token = kInprocToken;
    o.listen_address = "inproc:worker:0";
    o.log = [](std::string_view) {};
    auto t = transport::TransportRegistry::Global().Create("inproc", std::move(o));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return;
    transport = std::move(t).value();
    WorkerOptions w;
    w.threads = 1;
    w.calibrate = false;
    w.release_after = std::chrono::milliseconds(0);
    w.max_jobs = max_jobs;
    auto s = WorkerService::Create(transport.get(), w);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) service = std::move(s).value();
  }
  ~InprocWorker() {
    service.reset();  // before the transport it serves
    transport.reset();
  }
};

DistributedOptions InprocCluster(const std::vector<const InprocWorker*>& workers) {
  DistributedOptions o;
  o.transport = "inproc";
  for (const auto* w : workers) o.cluster.jobs["worker"].push_back(w->transport->listen_address());
  o.token = kInprocToken;
  o.connect_timeout = std::chrono::seconds(5);
  return o;
}

TEST(InprocClusterTest, MlpTrainsAcrossTwoWorkersAsInOneProcess) {
  InprocWorker w0, w1;
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto dist = DistributedSession::Create(model.root.graph(), {}, InprocCluster({&w0, &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  EXPECT_EQ((*dist)->device_set().size(), 2);
  EXPECT_GT((*dist)->placement().cross_edges, 0);

  ASSERT_NE(TrainsAsOnOneDevice(**dist, model), nullptr);
  EXPECT_EQ((*dist)->num_plans(), 2);  // the initializers, the training step
  EXPECT_EQ(w0.service->num_signatures(), 2);

  // A checkpoint gathers the variables of both workers and restores them.
  const std::string path = ::testing::TempDir() + "/inproc_cluster.dfckpt";
  ASSERT_TRUE((*dist)->SaveCheckpoint(path).ok());
  auto before = (*dist)->Run({}, {model.weights[2].name()});
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE((*dist)->Run(MlpBatch(7), {}, {model.step.name()}).ok());
  ASSERT_TRUE((*dist)->RestoreCheckpoint(path).ok());
  auto after = (*dist)->Run({}, {model.weights[2].name()});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*before)[0].ToVector<float>(), (*after)[0].ToVector<float>());
  std::filesystem::remove(path);
}

// The errors of a Run read the same whichever session gets it (runtime/run_signature.h).
TEST(InprocClusterTest, ARunsErrorsReadAsInALocalSession) {
  InprocWorker w0;
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0");
  Mlp local_model("", "");
  auto dist = DistributedSession::Create(model.root.graph(), {}, InprocCluster({&w0}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Session::Create(local_model.root);
  ASSERT_TRUE(local.ok());
  const Tensor wrong = Tensor::FromVector<float>({1, 2}, Shape{2});
  struct Case {
    Session::Feeds feeds;
    std::vector<std::string> fetches;
  };
  for (const Case& c : std::vector<Case>{{{{"x", wrong}}, {model.loss.name()}},
                                         {{{"nope", wrong}}, {model.loss.name()}},
                                         {{}, {"loss_of_nothing"}},
                                         {{}, {model.loss.name() + "7"}},
                                         {{}, {model.loss.name()}},
                                         {{}, {}}}) {
    auto d = (*dist)->Run(c.feeds, c.fetches);
    auto l = (*local)->Run(c.feeds, c.fetches);
    ASSERT_FALSE(d.ok());
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(d.status(), l.status());
  }
}

TEST(InprocClusterTest, AWorkerGoneMidSessionFailsTheStepNamingIt) {
  auto w0 = std::make_unique<InprocWorker>();
  InprocWorker w1;
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0");
  auto dist = DistributedSession::Create(model.root.graph(), {}, InprocCluster({w0.get(), &w1}));
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  ASSERT_TRUE((*dist)->Run({}, {}, model.init).ok());
  w0.reset();
  auto step = (*dist)->Run(MlpBatch(1), {model.loss.name()}, {model.step.name()});
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kUnavailable) << step.status().ToString();
  EXPECT_TRUE(MessageHas(step.status(), {"/job:worker/task:0"})) << step.status().ToString();
}

// Checkpoints in slices (DistributedOptions::checkpoint_chunk_bytes) as a worker takes them from
// any peer: slices in order assemble the variable; one out of order, one that does not fit, or a
// first slice naming more than the device holds is refused naming the variable and the device.
TEST(InprocClusterTest, VariableSlicesOutOfOrderOrTooBigAreRefusedNamingTheVariable) {
  InprocWorker w;
  transport::TransportOptions o;
  o.task = "/job:master/task:0";
  o.token = kInprocToken;
  o.log = [](std::string_view) {};
  auto client = transport::TransportRegistry::Global().Create("inproc", std::move(o));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Connect(w.transport->listen_address(), "/job:worker/task:0").ok());
  auto call = [&](Method m, const std::string& payload) {
    return (*client)->Call("/job:worker/task:0", static_cast<uint16_t>(m), payload,
                           std::chrono::seconds(10));
  };
  ASSERT_TRUE(call(Method::kGetDevices, "").ok());
  const std::string cpu = "/job:worker/task:0/device:CPU:0";
  auto slice = [&](int64_t offset, std::vector<float> values, std::vector<int64_t> dims = {}) {
    const auto n = static_cast<int64_t>(values.size());
    return Encode(VariableValues{{{cpu, "v", offset, n, std::move(dims)}},
                                 {Tensor::FromVector<float>(values, Shape{n})}});
  };

  auto early = call(Method::kWriteVariables, slice(3, {1, 2}));
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition) << early.status().ToString();
  EXPECT_TRUE(MessageHas(early.status(), {"'v'", cpu, "out of order"}));
  auto huge = call(Method::kWriteVariables, slice(0, {1}, {int64_t{1} << 30, 1 << 20}));
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
  EXPECT_TRUE(MessageHas(huge.status(), {"'v'", cpu, "limit"}));
  auto no_dims = call(Method::kWriteVariables, slice(0, {1, 2}));
  EXPECT_EQ(no_dims.status().code(), StatusCode::kInvalidArgument) << no_dims.status().ToString();
  // Without dims the variable is a scalar, which two elements do not fit.
  EXPECT_TRUE(MessageHas(no_dims.status(), {"'v'", "does not fit"}));

  // In order: [0, 4) then [4, 6) of a [2, 3] variable; a slice past its end is refused.
  ASSERT_TRUE(call(Method::kWriteVariables, slice(0, {1, 2, 3, 4}, {2, 3})).ok());
  auto past = call(Method::kWriteVariables, slice(4, {5, 6, 7}));
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument) << past.status().ToString();
  EXPECT_TRUE(MessageHas(past.status(), {"'v'", "does not fit"}));
  ASSERT_TRUE(call(Method::kWriteVariables, slice(0, {1, 2, 3, 4}, {2, 3})).ok());
  ASSERT_TRUE(call(Method::kWriteVariables, slice(4, {5, 6})).ok());
  auto whole = call(Method::kReadVariables, Encode(VariablesRequest{{{cpu, "v"}}}));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto values = DecodeVariableValues(*whole, "reply");
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(values->values[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values->values[0].ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  // Read back in slices: out of order refused, in order the same values.
  auto skipped = call(Method::kReadVariables, Encode(VariablesRequest{{{cpu, "v", 2, 2, {}}}}));
  EXPECT_EQ(skipped.status().code(), StatusCode::kFailedPrecondition)
      << skipped.status().ToString();
  EXPECT_TRUE(MessageHas(skipped.status(), {"'v'", cpu, "out of order"}));
  std::vector<float> read;
  for (auto [offset, count] : {std::pair<int64_t, int64_t>{0, 4}, {4, 2}}) {
    auto part =
        call(Method::kReadVariables, Encode(VariablesRequest{{{cpu, "v", offset, count, {}}}}));
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    auto got = DecodeVariableValues(*part, "reply");
    ASSERT_TRUE(got.ok());
    for (float f : got->values[0].ToVector<float>()) read.push_back(f);
  }
  EXPECT_EQ(read, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

// Each master's requests are its job's: a variable one master sets is not another's, unless
// both name the same job; a job ends when its master says so; past max_jobs a new one is
// refused naming the worker and the flag.
TEST(InprocClusterTest, EachMasterHasItsOwnJobUnlessItNamesASharedOne) {
  InprocWorker w(/*max_jobs=*/2);
  const std::string cpu = "/job:worker/task:0/device:CPU:0";
  struct Master {
    std::unique_ptr<transport::Transport> t;
    Result<std::string> Call(Method m, const std::string& payload) {
      return t->Call("/job:worker/task:0", static_cast<uint16_t>(m), payload,
                     std::chrono::seconds(10));
    }
  };
  auto master = [&](int i) {
    transport::TransportOptions o;
    o.task = fmt::format("/job:master/task:{}", i);
    o.token = kInprocToken;
    o.log = [](std::string_view) {};
    auto t = transport::TransportRegistry::Global().Create("inproc", std::move(o));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE((*t)->Connect(w.transport->listen_address(), "/job:worker/task:0").ok());
    return Master{std::move(t).value()};
  };
  auto write = [&](Master& m, std::vector<float> v) {
    const auto n = static_cast<int64_t>(v.size());
    return m.Call(Method::kWriteVariables,
                  Encode(VariableValues{{{cpu, "v"}}, {Tensor::FromVector<float>(v, Shape{n})}}));
  };
  auto read = [&](Master& m) -> Result<std::vector<float>> {
    ASSIGN_OR_RETURN(std::string reply,
                     m.Call(Method::kReadVariables, Encode(VariablesRequest{{{cpu, "v"}}})));
    ASSIGN_OR_RETURN(VariableValues values, DecodeVariableValues(reply, "reply"));
    return values.values[0].ToVector<float>();
  };
  Master own = master(1), shared = master(2);
  ASSERT_TRUE(own.Call(Method::kGetDevices, "").ok());
  ASSERT_TRUE(shared.Call(Method::kGetDevices, Encode(GetDevicesRequest{"shared"})).ok());
  EXPECT_EQ(w.service->num_jobs(), 2);
  ASSERT_TRUE(write(own, {1, 2}).ok());
  auto unseen = read(shared);
  EXPECT_EQ(unseen.status().code(), StatusCode::kFailedPrecondition) << unseen.status().ToString();
  EXPECT_TRUE(MessageHas(unseen.status(), {"'v'", "uninitialised"}));
  ASSERT_TRUE(write(shared, {3}).ok());
  EXPECT_EQ(read(own).value(), (std::vector<float>{1, 2}));

  // A step of a signature its job never compiled names the worker and the signature, and
  // makes no job.
  Master stranger = master(5);
  auto unknown = stranger.Call(Method::kRunStep, Encode(RunStepRequest{"sig-9", 1, 0, false, {}}));
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  EXPECT_TRUE(MessageHas(unknown.status(), {"/job:worker/task:0", "'sig-9'"}));
  auto in_job = own.Call(Method::kRunStep, Encode(RunStepRequest{"sig-9", 1, 0, false, {}}));
  EXPECT_TRUE(MessageHas(in_job.status(), {"'sig-9'", "the job of /job:master/task:1"}))
      << in_job.status().ToString();
  EXPECT_EQ(w.service->num_jobs(), 2);

  // A third job is one too many.
  Master third = master(3);
  auto refused = third.Call(Method::kGetDevices, Encode(GetDevicesRequest{"third"}));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_TRUE(MessageHas(refused.status(), {"/job:worker/task:0", "--max-jobs", "'third'"}));
  // A master asking for another job than the one its requests are is refused too.
  auto switched = shared.Call(Method::kGetDevices, Encode(GetDevicesRequest{"other"}));
  EXPECT_EQ(switched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(switched.status(), {"'other'", "'shared'"}));

  // The first master ends its job; the third's fits now, and a fourth master naming the shared
  // job finds the variable the second set.
  ASSERT_TRUE(own.Call(Method::kRelease, Encode(ReleaseRequest{"", true})).ok());
  EXPECT_EQ(w.service->num_jobs(), 1);
  // Its devices, emptied, wait for the next job: the third's, which finds no variable of it.
  for (int i = 0; i < 200 && w.service->num_spare_device_sets() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(w.service->num_spare_device_sets(), 1);
  EXPECT_TRUE(third.Call(Method::kGetDevices, Encode(GetDevicesRequest{"third"})).ok());
  EXPECT_EQ(w.service->num_spare_device_sets(), 0);
  auto cleared = read(third);
  EXPECT_EQ(cleared.status().code(), StatusCode::kFailedPrecondition)
      << cleared.status().ToString();
  Master fourth = master(4);
  ASSERT_TRUE(fourth.Call(Method::kGetDevices, Encode(GetDevicesRequest{"shared"})).ok());
  EXPECT_EQ(read(fourth).value(), (std::vector<float>{3}));
  EXPECT_EQ(w.service->num_jobs(), 2);

  // A session's job name is printable ASCII without spaces, at most 256 bytes.
  Mlp model("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0");
  for (const std::string& bad : {std::string("my job"), std::string(300, 'j')}) {
    DistributedOptions o = InprocCluster({&w});
    o.job = bad;
    auto refused = DistributedSession::Create(model.root.graph(), {}, o);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(MessageHas(refused.status(), {"job '", "printable"}))
        << refused.status().ToString();
  }
}

}  // namespace
}  // namespace dflow::distributed
