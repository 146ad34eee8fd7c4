#include "runtime/local_rendezvous.h"

#include "framework/rendezvous_conformance.h"

namespace dflow::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Local, RendezvousConformance,
                         ::testing::Values(RendezvousUnderTest{
                             "LocalRendezvous",
                             [] { return std::make_unique<LocalRendezvousFactory>(); }}),
                         [](const auto& info) { return info.param.name; });

// In one process a host tensor changes hands without a copy.
TEST(LocalRendezvousTest, HostTensorsAreHandedOverWithoutACopy) {
  LocalRendezvous r;
  RendezvousKey k;
  k.tensor = "x:0";
  Tensor t = Tensor::FromVector<float>({1, 2}, Shape{2});
  ASSERT_TRUE(r.Send(k, {"send"}, t).ok());
  Tensor got;
  r.RecvAsync(k,
              {.node = "recv",
               .dtype = DType::kF32,
               .shape = Shape{2},
               .allocator = CpuAllocator::Default()},
              [&](const Status& s, const Tensor& v) {
                ASSERT_TRUE(s.ok());
                got = v;
              });
  EXPECT_TRUE(got.SharesBufferWith(t));
}

// Destroying a rendezvous with a receive still waiting fails it instead of leaking it.
TEST(LocalRendezvousTest, DestructionFailsWaitingReceives) {
  Status seen;
  {
    LocalRendezvous r;
    RendezvousKey k;
    k.tensor = "x:0";
    r.RecvAsync(k, {.node = "recv", .dtype = DType::kF32, .shape = Shape{2}},
                [&](const Status& s, const Tensor&) { seen = s; });
  }
  EXPECT_EQ(seen.code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace dflow::testing
