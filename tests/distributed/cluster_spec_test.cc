// ClusterSpec's hosts for the replicas of a data-parallel graph.
#include "distributed/cluster_spec.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace dflow::distributed {
namespace {

using testing::MessageHas;

TEST(ClusterSpecTest, ReplicaHostsAreTheTasksAddressesWithoutPorts) {
  auto cluster = ClusterSpec::Parse(
      R"({"worker": ["10.0.0.1:7001", "10.0.0.1:7002", "10.0.0.2:7001"], "ps": ["[::1]:7000"]})",
      "test");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto hosts =
      ReplicaHosts(*cluster, {"/job:worker/task:0/device:CPU:0", "worker:1/cpu:0",
                              "/job:worker/task:2/device:CPU:0", "/job:ps/task:0", "cpu:1"});
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_EQ(*hosts,
            (std::vector<std::string>{"10.0.0.1", "10.0.0.1", "10.0.0.2", "[::1]", "localhost"}));
}

TEST(ClusterSpecTest, ReplicaHostsNameADeviceTheClusterLacks) {
  auto cluster = ClusterSpec::Parse(R"({"worker": ["127.0.0.1:7001"]})", "test");
  ASSERT_TRUE(cluster.ok());
  auto missing = ReplicaHosts(*cluster, {"/job:worker/task:1/device:CPU:0"});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(missing.status(), {"no task", "'/job:worker/task:1/device:CPU:0'"}))
      << missing.status().ToString();
  auto bad = ReplicaHosts(*cluster, {"tpu:0"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"tpu:0"})) << bad.status().ToString();
}

TEST(ClusterSpecTest, ASparseClusterKeepsEachTasksIndex) {
  ClusterSpec sparse;
  sparse.jobs["worker"] = {"", "10.0.0.2:7001", "", "10.0.0.4:7001"};
  const auto tasks = sparse.tasks();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].name, "/job:worker/task:1");
  EXPECT_EQ(tasks[1].name, "/job:worker/task:3");
  EXPECT_EQ(tasks[1].address, "10.0.0.4:7001");
  auto hosts = ReplicaHosts(sparse, {"/job:worker/task:3/device:CPU:0"});
  ASSERT_TRUE(hosts.ok());
  EXPECT_EQ(hosts->at(0), "10.0.0.4");
  EXPECT_TRUE(MessageHas(ReplicaHosts(sparse, {"/job:worker/task:2/device:CPU:0"}).status(),
                         {"no task for device '/job:worker/task:2/device:CPU:0'"}));
}

}  // namespace
}  // namespace dflow::distributed
