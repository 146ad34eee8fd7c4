// tools::ParseDeviceList (--devices) and DevicesRequestedBy (the tools' default): canonical
// names in numeric order, one entry per device however it is spelled, and the errors.
#include "tools/device_list.h"

#include <gtest/gtest.h>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/sim/sim_backend.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow::tools {
namespace {

using testing::MessageHas;
using Devices = std::vector<std::string>;

TEST(DeviceListTest, DevicesFlagIsCanonicalAndNumericallyOrdered) {
  EXPECT_EQ(ParseDeviceList("cpu:0").value(), Devices({"cpu:0"}));
  EXPECT_EQ(ParseDeviceList("cpu:1,CPU:0").value(), Devices({"cpu:0", "cpu:1"}));
  EXPECT_EQ(ParseDeviceList("/job:localhost/task:0/device:CPU:1,/device:cpu:0").value(),
            Devices({"cpu:0", "cpu:1"}));
  // 12 devices given in text order: cpu:10 and cpu:11 sort after cpu:9.
  Devices twelve;
  for (int i = 0; i < 12; ++i) twelve.push_back("cpu:" + std::to_string(i));
  EXPECT_EQ(ParseDeviceList("cpu:0,cpu:1,cpu:10,cpu:11,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7,cpu:8,"
                            "cpu:9")
                .value(),
            twelve);
}

TEST(DeviceListTest, DevicesFlagErrorsNameTheFlagAndTheDevice) {
  struct Case {
    const char* text;
    std::vector<std::string> words;
  };
  for (const Case& c : std::vector<Case>{
           {"cpu:0,cpu:0", {"'cpu:0' and 'cpu:0' are the same device, cpu:0"}},
           {"cpu:0,CPU:1,/job:localhost/task:0/device:CPU:1",
            {"'CPU:1' and '/job:localhost/task:0/device:CPU:1' are the same device, cpu:1"}},
           {"cpu:0,,cpu:1", {"an empty device name"}},
           {"", {"an empty device name"}},
           {"cpu:0,cpu", {"'cpu' names no single device", "cpu:0"}},
           // No GPU here, or fewer than 8: the reason is given.
           {"cpu:0,gpu:7", {"'gpu:7'", "GPU"}},
           {"cpu:0,/job:worker/task:0/device:CPU:1",
            {"'/job:worker/task:0/device:CPU:1' is not a device of this process", "--cluster"}},
           {"cpu:0,cpu:2", {"CPU devices are cpu:0 .. cpu:N-1", "cpu:1 is missing"}},
           {"cpu:1", {"cpu:0 is missing"}},
           {"cpu:0,tpu:1", {"malformed device name 'tpu:1'"}},
       }) {
    auto r = ParseDeviceList(c.text);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    std::vector<std::string> words = c.words;
    words.push_back(fmt::format("--devices '{}': ", c.text));
    EXPECT_TRUE(MessageHas(r.status(), words)) << c.text;
  }
  std::string many;
  for (int i = 0; i <= kMaxDevices; ++i) many += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  EXPECT_TRUE(MessageHas(ParseDeviceList(many).status(), {"65 devices, more than the 64"}));
}

Graph Pinned(const std::vector<std::string>& devices) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  for (size_t i = 0; i < devices.size(); ++i) {
    x = ops::Neg(root.WithOpName("n" + std::to_string(i)).WithDevice(devices[i]), x);
  }
  Graph g = root.graph();
  EXPECT_TRUE(g.Validate().ok());
  return g;
}

TEST(DeviceListTest, RequestedDevicesAreOneEntryPerDeviceUpToTheHighest) {
  EXPECT_EQ(DevicesRequestedBy(Pinned({})).value(), Devices({"cpu:0"}));
  // Three spellings of cpu:1: one device.
  EXPECT_EQ(
      DevicesRequestedBy(Pinned({"cpu:1", "CPU:1", "/job:localhost/task:0/device:CPU:1", "cpu:0"}))
          .value(),
      Devices({"cpu:0", "cpu:1"}));
  // Numeric order, and the devices below the highest filled in.
  Devices eleven;
  for (int i = 0; i <= 10; ++i) eleven.push_back("cpu:" + std::to_string(i));
  EXPECT_EQ(DevicesRequestedBy(Pinned({"cpu:10", "cpu:2"})).value(), eleven);
  EXPECT_EQ(DevicesRequestedBy(Pinned({"cpu:3"})).value(),
            Devices({"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
  // Requests of no particular local device add nothing (the session judges them); a device of
  // another type is added as requested.
  EXPECT_EQ(DevicesRequestedBy(Pinned({"cpu", "/job:ps"})).value(), Devices({"cpu:0"}));
  EXPECT_EQ(DevicesRequestedBy(Pinned({"gpu:1", "cpu:1", "GPU:1"})).value(),
            Devices({"cpu:0", "cpu:1", "gpu:1"}));
}

// Issue 31: the tools refused gpu:N where the examples took it. Every registered device type is
// taken, here the tests' stand-in SIM with two devices: CPU first, then by type and index, and
// an index past the type's devices named with how many there are.
TEST(DeviceListTest, EveryRegisteredDeviceTypeIsTaken) {
  static const bool registered = [] {
    DeviceType sim = sim::SimDeviceType();
    sim.count = [](std::string*) { return 2; };
    return DeviceFactory::Global().Register(sim).ok();
  }();
  ASSERT_TRUE(registered);
  EXPECT_EQ(ParseDeviceList("sim:1,cpu:0,SIM:0").value(), Devices({"cpu:0", "sim:0", "sim:1"}));
  EXPECT_EQ(ParseDeviceList("sim:1").value(), Devices({"sim:1"}));
  auto past = ParseDeviceList("cpu:0,sim:2");
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      MessageHas(past.status(), {"'sim:2'", "this process has 2 SIM devices", "sim:0 .. sim:1"}))
      << past.status().ToString();
  auto twice = ParseDeviceList("sim:0,/device:SIM:0");
  EXPECT_TRUE(MessageHas(twice.status(), {"are the same device, sim:0"}))
      << twice.status().ToString();
}

TEST(DeviceListTest, RequestedDevicesErrorsNameTheNode) {
  auto far = DevicesRequestedBy(Pinned({"cpu:0", "cpu:64"}));
  EXPECT_EQ(far.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(far.status(), {"node 'n1'", "CPU:64'", "--devices"}));
  // A file may hold any request string.
  Graph g = Pinned({"cpu:0", "cpu:1"});
  Graph bad;
  for (int v = 0; v < g.num_nodes(); ++v) {
    NodeDef def = g.node(v).def();
    if (def.name == "n1") def.device = "tpu:1";
    ASSERT_TRUE(bad.AddNode(std::move(def)).ok());
  }
  ASSERT_TRUE(bad.Validate().ok());
  auto malformed = DevicesRequestedBy(bad);
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(malformed.status(), {"node 'n1'", "'tpu:1'"}));
}

TEST(DeviceListTest, JoinDevices) {
  EXPECT_EQ(JoinDevices({"cpu:0", "cpu:1"}), "cpu:0,cpu:1");
  EXPECT_EQ(JoinDevices({}), "");
}

}  // namespace
}  // namespace dflow::tools
