// The rendezvous conformance suite: the contract of framework/rendezvous.h, checked on any
// implementation (its cases are in rendezvous_conformance.cc, which a test binary compiles once).
// An implementation's test file instantiates it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Local, RendezvousConformance,
//                            ::testing::Values(RendezvousUnderTest{"local", [] {
//                              return std::make_unique<LocalRendezvousFactory>(); }}));
//
// Each case makes its own factory and rendezvous, so transports that need setup (endpoints,
// peers) do it in the factory function. Every wait is bounded: a broken implementation fails a
// case instead of hanging the suite.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "framework/rendezvous.h"
#include "graph/allocator.h"
#include "status_matchers.h"

namespace dflow::testing {

struct RendezvousUnderTest {
  std::string name;
  std::function<std::unique_ptr<RendezvousFactory>()> make_factory;
};

inline void PrintTo(const RendezvousUnderTest& r, std::ostream* os) { *os << r.name; }

// The outcome of one RecvAsync, waited for with a bound.
class RecvResult {
 public:
  Rendezvous::DoneCallback Callback() {
    return [this](const Status& s, const Tensor& t) {
      std::lock_guard lock(mu_);
      calls_++;
      status_ = s;
      tensor_ = t;
      cv_.notify_all();
    };
  }
  // True when the callback came within `limit`.
  bool Wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return calls_ > 0; });
  }
  bool arrived() {
    std::lock_guard lock(mu_);
    return calls_ > 0;
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }
  Tensor tensor() {
    std::lock_guard lock(mu_);
    return tensor_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  Status status_;
  Tensor tensor_;
};

class RendezvousConformance : public ::testing::TestWithParam<RendezvousUnderTest> {
 protected:
  void SetUp() override {
    factory_ = GetParam().make_factory();
    ASSERT_NE(factory_, nullptr);
    auto r = factory_->Create(1);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    rendezvous_ = std::move(r).value();
  }

  static RendezvousKey Key(const std::string& tensor, int64_t step = 1) {
    RendezvousKey k;
    k.src_device = "/job:localhost/task:0/device:CPU:0";
    k.src_incarnation = 42;
    k.dst_device = "/job:localhost/task:0/device:CPU:1";
    k.tensor = tensor;
    k.step_id = step;
    return k;
  }
  static RecvArgs Expect(DType dtype, const Shape& shape, const char* node = "recv") {
    RecvArgs a;
    a.node = node;
    a.dtype = dtype;
    a.shape = shape;
    a.allocator = CpuAllocator::Default();
    return a;
  }
  static Tensor Values(std::vector<float> v) {
    int64_t n = static_cast<int64_t>(v.size());
    return Tensor::FromVector<float>(std::move(v), Shape{n});
  }

  std::unique_ptr<RendezvousFactory> factory_;
  std::unique_ptr<Rendezvous> rendezvous_;
};

}  // namespace dflow::testing
