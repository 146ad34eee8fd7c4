// The control messages between a master and its workers (distributed/messages.h): every one
// round-trips with its values, and bytes that are not a message of the kind asked for are an
// InvalidArgument naming it.
#include "distributed/messages.h"

#include <gtest/gtest.h>

#include "status_matchers.h"

namespace dflow::distributed {
namespace {

using testing::MessageHas;

Tensor Values() { return Tensor::FromVector<float>({1.5f, -2, 0.25f, 8, 0, -0.5f}, Shape{2, 3}); }

void ExpectSameValues(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.num_elements(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST(MessagesTest, EveryMessageRoundTripsWithItsValues) {
  GetDevicesReply devices{{{"/job:worker/task:0/device:CPU:0", 77, 2e9, 3e11, 4e10, 2e-6},
                           {"/job:worker/task:0/device:CPU:1", 78, 1e9, 1e11, 1e10, 1e-6}},
                          1.5e-5,
                          9e9};
  auto d = DecodeGetDevicesReply(Encode(devices));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->devices.size(), 2u);
  EXPECT_EQ(d->devices[1].name, "/job:worker/task:0/device:CPU:1");
  EXPECT_EQ(d->devices[0].incarnation, 77u);
  EXPECT_EQ(d->devices[0].peak_flops, 3e11);
  EXPECT_EQ(d->devices[0].launch_overhead_s, 2e-6);
  EXPECT_EQ(d->same_process_bandwidth, 9e9);

  PartitionShare share;
  share.feeds = {{1, "x"}};
  share.fetches = {{0, "y", 2}, {3, "z", 0}};
  share.targets = {"train", "log"};
  CompileRequest compile{
      "sig-7", 2,    4,
      false,   true, {{"/job:worker/task:1/device:CPU:0", std::string("gr\0aph", 6), share}}};
  auto c = DecodeCompileRequest(Encode(compile));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->signature, "sig-7");
  EXPECT_EQ(c->num_feeds, 2);
  EXPECT_EQ(c->num_fetches, 4);
  EXPECT_FALSE(c->plan_memory);
  EXPECT_TRUE(c->fuse_epilogues);
  ASSERT_EQ(c->partitions.size(), 1u);
  EXPECT_EQ(c->partitions[0].graph, std::string("gr\0aph", 6));
  EXPECT_EQ(c->partitions[0].share.feeds[0].node, "x");
  EXPECT_EQ(c->partitions[0].share.fetches[0].output, 2);
  EXPECT_EQ(c->partitions[0].share.fetches[1].index, 3);
  EXPECT_EQ(c->partitions[0].share.targets, share.targets);

  RunStepRequest run{"sig-7", (int64_t{1} << 33) + 5, 1500, true, {{1, Values()}}};
  auto r = DecodeRunStepRequest(Encode(run));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, run.step);
  EXPECT_EQ(r->timeout_ms, 1500);
  EXPECT_TRUE(r->trace);
  ASSERT_EQ(r->feeds.size(), 1u);
  EXPECT_EQ(r->feeds[0].first, 1);
  ExpectSameValues(r->feeds[0].second, Values());

  RunStepReply reply{{{3, Values()}},
                     {{"/job:worker/task:1/device:CPU:0",
                       {{"y", "MatMul", NodeSpan{10, 20, 1, false}, ""},
                        {"y/_recv", "_Recv", NodeSpan{5, 9, 0, true}, "key"}}}}};
  auto rr = DecodeRunStepReply(Encode(reply));
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  ASSERT_EQ(rr->fetches.size(), 1u);
  ExpectSameValues(rr->fetches[0].second, Values());
  ASSERT_EQ(rr->devices.size(), 1u);
  ASSERT_EQ(rr->devices[0].nodes.size(), 2u);
  EXPECT_EQ(rr->devices[0].nodes[1].op, "_Recv");
  EXPECT_EQ(rr->devices[0].nodes[1].span.end_ns, 9);
  EXPECT_TRUE(rr->devices[0].nodes[1].span.async);
  EXPECT_EQ(rr->devices[0].nodes[1].transfer, "key");

  EXPECT_EQ(DecodeReleaseRequest(Encode(ReleaseRequest{"sig-7"}))->signature, "sig-7");
  EXPECT_FALSE(DecodeReleaseRequest(Encode(ReleaseRequest{"sig-7"}))->end_job);
  EXPECT_TRUE(DecodeReleaseRequest(Encode(ReleaseRequest{"", true}))->end_job);
  EXPECT_EQ(DecodeGetDevicesRequest(Encode(GetDevicesRequest{"resnet-run-3"}))->job,
            "resnet-run-3");
  // A master that names no job sends none, or nothing at all.
  EXPECT_EQ(DecodeGetDevicesRequest(Encode(GetDevicesRequest{}))->job, "");
  EXPECT_EQ(DecodeGetDevicesRequest("")->job, "");
  auto peers = DecodeConnectPeersRequest(
      Encode(ConnectPeersRequest{{{"/job:worker/task:0", "a:1"}, {"/job:worker/task:1", "b:2"}}}));
  ASSERT_TRUE(peers.ok());
  EXPECT_EQ(peers->peers[1].second, "b:2");
  auto read = DecodeVariablesRequest(
      Encode(VariablesRequest{{{"dev", "w"}, {"dev", "b", 1024, 512, {64, 32}}}}));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->variables[1].name, "b");
  EXPECT_EQ(read->variables[0].count, -1);  // whole
  EXPECT_EQ(read->variables[1].offset, 1024);
  EXPECT_EQ(read->variables[1].count, 512);
  EXPECT_EQ(read->variables[1].dims, (std::vector<int64_t>{64, 32}));
  // A slice that cannot be: refused naming the variable.
  for (VariableRef bad : {VariableRef{"dev", "s", -1, 4, {}}, VariableRef{"dev", "s", 8, -1, {}},
                          VariableRef{"dev", "s", 0, 4, {-3}}}) {
    auto refused = DecodeVariablesRequest(Encode(VariablesRequest{{bad}}));
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(refused.status(), {"'s'"})) << refused.status().ToString();
  }
  auto values = DecodeVariableValues(Encode(VariableValues{{{"dev", "w"}}, {Values()}}),
                                     "WriteVariables request");
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  ExpectSameValues(values->values[0], Values());
  auto ask = DecodeMeasureLinksRequest(Encode(MeasureLinksRequest{{"/job:worker/task:1"}}));
  EXPECT_EQ(ask->tasks, std::vector<std::string>{"/job:worker/task:1"});
  auto links =
      DecodeMeasureLinksReply(Encode(MeasureLinksReply{{{"/job:worker/task:1", 2e-5, 5e9}}}));
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->links[0].bandwidth, 5e9);
  auto join = DecodeRegisterRequest(
      Encode(RegisterRequest{3, 4, "10.0.0.7:7001", {"cpu:0", "gpu:1"}, "Slurm"}));
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  EXPECT_EQ(join->rank, 3);
  EXPECT_EQ(join->world_size, 4);
  EXPECT_EQ(join->address, "10.0.0.7:7001");
  EXPECT_EQ(join->devices, (std::vector<std::string>{"cpu:0", "gpu:1"}));
  EXPECT_EQ(join->launcher, "Slurm");
  auto named = DecodeRegisterReply(Encode(RegisterReply{"/job:worker/task:3", 4}));
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->task, "/job:worker/task:3");
  EXPECT_EQ(named->world_size, 4);
}

TEST(MessagesTest, RepliesHaveLimitsByMethod) {
  EXPECT_EQ(MaxReplyBytes(Method::kGetDevices), uint64_t{4} << 20);
  EXPECT_EQ(MaxReplyBytes(Method::kCompile), uint64_t{4} << 10);
  EXPECT_EQ(MaxReplyBytes(Method::kRegister), uint64_t{64} << 10);
  EXPECT_EQ(MaxReplyBytes(Method::kRunStep), uint64_t{1} << 30);
  EXPECT_EQ(MaxReplyBytes(Method::kReadVariables), uint64_t{1} << 30);
  // A list of 1000 devices fits its limit.
  GetDevicesReply many;
  for (int i = 0; i < 1000; ++i) {
    many.devices.push_back({"/job:worker/task:0/device:CPU:" + std::to_string(i), 1, 1, 1, 1, 1});
  }
  EXPECT_LT(Encode(many).size(), MaxReplyBytes(Method::kGetDevices));
}

TEST(MessagesTest, RegisterRequestsOutOfRangeAreRefused) {
  for (const RegisterRequest& bad : {
           RegisterRequest{4, 4, "h:1", {"cpu:0"}, ""},   // rank past the world
           RegisterRequest{-2, 0, "h:1", {"cpu:0"}, ""},  // not a rank
           RegisterRequest{0, 1, "", {"cpu:0"}, ""},      // no address
           RegisterRequest{0, 1, std::string(2000, 'h'), {"cpu:0"}, ""},
           RegisterRequest{0, 1, "h:1", {}, ""},  // no device
       }) {
    auto d = DecodeRegisterRequest(Encode(bad));
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << bad.address.size();
    EXPECT_TRUE(MessageHas(d.status(), {"Register request"})) << d.status().ToString();
  }
  EXPECT_TRUE(
      MessageHas(DecodeRegisterReply(Encode(RegisterReply{"/job:worker/task:0", 0})).status(),
                 {"Register reply", "world size 0"}));
}

TEST(MessagesTest, TruncatedOrForeignBytesAreRefusedNamingTheMessage) {
  const std::string compile = Encode(CompileRequest{
      "s", 1, 1, true, true, {{"/job:worker/task:0/device:CPU:0", "graph", PartitionShare{}}}});
  for (size_t n = 0; n < compile.size(); ++n) {
    auto d = DecodeCompileRequest(std::string_view(compile).substr(0, n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(d.status(), {"Compile request"})) << d.status().ToString();
  }
  auto trailing = DecodeCompileRequest(compile + "x");
  EXPECT_TRUE(MessageHas(trailing.status(), {"Compile request", "trailing"}))
      << trailing.status().ToString();
  // A Release request lacks what a Compile request requires.
  auto foreign = DecodeCompileRequest(Encode(ReleaseRequest{"s"}));
  EXPECT_TRUE(MessageHas(foreign.status(), {"Compile request", "not a valid message"}))
      << foreign.status().ToString();
  auto empty = DecodeRunStepRequest("");
  EXPECT_TRUE(MessageHas(empty.status(), {"RunStep request"})) << empty.status().ToString();
}

TEST(MessagesTest, FieldsOutOfRangeAreRefused) {
  auto long_job = DecodeGetDevicesRequest(Encode(GetDevicesRequest{std::string(300, 'j')}));
  EXPECT_TRUE(MessageHas(long_job.status(), {"GetDevices request", "'job'", "300 bytes"}))
      << long_job.status().ToString();
  auto odd_job = DecodeGetDevicesRequest(Encode(GetDevicesRequest{"run\n7"}));
  EXPECT_TRUE(MessageHas(odd_job.status(), {"GetDevices request", "0x0a", "printable"}))
      << odd_job.status().ToString();
  auto no_devices = DecodeGetDevicesReply(Encode(GetDevicesReply{}));
  EXPECT_TRUE(MessageHas(no_devices.status(), {"GetDevices reply", "no devices"}))
      << no_devices.status().ToString();
  auto no_partition = DecodeCompileRequest(Encode(CompileRequest{"s", 0, 0, true, true, {}}));
  EXPECT_TRUE(MessageHas(no_partition.status(), {"Compile request", "no partition"}))
      << no_partition.status().ToString();
  auto negative = DecodeCompileRequest(
      Encode(CompileRequest{"s", -1, 0, true, true, {{"d", "g", PartitionShare{}}}}));
  EXPECT_TRUE(MessageHas(negative.status(), {"Compile request", "-1 feeds"}))
      << negative.status().ToString();
  auto timeout = DecodeRunStepRequest(Encode(RunStepRequest{"s", 1, -5, false, {}}));
  EXPECT_TRUE(MessageHas(timeout.status(), {"RunStep request", "-5 ms"}))
      << timeout.status().ToString();
  auto index = DecodeRunStepReply(Encode(RunStepReply{{{-2, Values()}}, {}}));
  EXPECT_TRUE(MessageHas(index.status(), {"RunStep reply", "index -2"}))
      << index.status().ToString();
  auto mismatch = DecodeVariableValues(Encode(VariableValues{{{"d", "w"}, {"d", "b"}}, {Values()}}),
                                       "WriteVariables request");
  EXPECT_TRUE(MessageHas(mismatch.status(), {"WriteVariables request", "1 values for 2"}))
      << mismatch.status().ToString();
}

}  // namespace
}  // namespace dflow::distributed
