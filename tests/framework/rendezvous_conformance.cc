// The cases of the rendezvous conformance suite (rendezvous_conformance.h).
#include "framework/rendezvous_conformance.h"

namespace dflow::testing {

TEST_P(RendezvousConformance, SendBeforeRecv) {
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"send_a"}, Values({1, 2, 3})).ok());
  RecvResult r;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{3}), r.Callback());
  ASSERT_TRUE(r.Wait());
  ASSERT_TRUE(r.status().ok()) << r.status().ToString();
  EXPECT_EQ(r.tensor().ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(r.calls(), 1);
}

TEST_P(RendezvousConformance, RecvBeforeSend) {
  RecvResult r;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{-1}), r.Callback());
  EXPECT_FALSE(r.Wait(std::chrono::milliseconds(20)));  // nothing sent yet
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"send_a"}, Values({4, 5})).ok());
  ASSERT_TRUE(r.Wait());
  ASSERT_TRUE(r.status().ok()) << r.status().ToString();
  EXPECT_EQ(r.tensor().ToVector<float>(), (std::vector<float>{4, 5}));
}

TEST_P(RendezvousConformance, KeysDifferingInAnyFieldDoNotMeet) {
  RendezvousKey base = Key("a:0");
  std::vector<RendezvousKey> others(6, base);
  others[0].src_device = "/job:localhost/task:0/device:CPU:2";
  others[1].src_incarnation = 43;
  others[2].dst_device = "/job:localhost/task:0/device:CPU:2";
  others[3].tensor = "a:1";
  others[4].step_id = 2;
  others[5].iteration = 1;
  std::vector<std::unique_ptr<RecvResult>> results;
  for (const auto& k : others) {
    results.push_back(std::make_unique<RecvResult>());
    rendezvous_->RecvAsync(k, Expect(DType::kF32, Shape{1}), results.back()->Callback());
  }
  ASSERT_TRUE(rendezvous_->Send(base, {"send"}, Values({7})).ok());
  for (auto& r : results) EXPECT_FALSE(r->Wait(std::chrono::milliseconds(10)));
  RecvResult mine;
  rendezvous_->RecvAsync(base, Expect(DType::kF32, Shape{1}), mine.Callback());
  ASSERT_TRUE(mine.Wait());
  EXPECT_TRUE(mine.status().ok());
  rendezvous_->Abort(Cancelled("test over"));
  for (auto& r : results) ASSERT_TRUE(r->Wait());
}

TEST_P(RendezvousConformance, AbortFailsPendingAndLaterReceivesAndSends) {
  RecvResult a, b;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{1}), a.Callback());
  rendezvous_->RecvAsync(Key("b:0"), Expect(DType::kF32, Shape{1}), b.Callback());
  rendezvous_->Abort(Internal("node 'boom' failed"));
  ASSERT_TRUE(a.Wait());
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(a.status(), Internal("node 'boom' failed"));
  EXPECT_EQ(b.status(), Internal("node 'boom' failed"));
  RecvResult later;
  rendezvous_->RecvAsync(Key("c:0"), Expect(DType::kF32, Shape{1}), later.Callback());
  ASSERT_TRUE(later.Wait());
  EXPECT_EQ(later.status(), Internal("node 'boom' failed"));
  EXPECT_EQ(rendezvous_->Send(Key("d:0"), {"send_d"}, Values({1})), Internal("node 'boom' failed"));
  // The first abort wins.
  rendezvous_->Abort(Cancelled("second"));
  RecvResult last;
  rendezvous_->RecvAsync(Key("e:0"), Expect(DType::kF32, Shape{1}), last.Callback());
  ASSERT_TRUE(last.Wait());
  EXPECT_EQ(last.status().code(), StatusCode::kInternal);
  EXPECT_EQ(a.calls(), 1);
}

TEST_P(RendezvousConformance, DuplicateSendIsRefusedNamingBothSends) {
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"first_send"}, Values({1})).ok());
  Status again = rendezvous_->Send(Key("a:0"), {"second_send"}, Values({2}));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(again, {"sent twice", "first_send", "second_send", "a:0"}));
  RecvResult r;  // the first value stays
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{1}), r.Callback());
  ASSERT_TRUE(r.Wait());
  EXPECT_EQ(r.tensor().ToVector<float>(), (std::vector<float>{1}));
}

TEST_P(RendezvousConformance, DuplicateRecvIsRefused) {
  RecvResult first, second;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{1}, "recv_1"), first.Callback());
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{1}, "recv_2"), second.Callback());
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageHas(second.status(), {"recv_1", "recv_2"}));
  EXPECT_FALSE(first.arrived());
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"send"}, Values({3})).ok());
  ASSERT_TRUE(first.Wait());
  EXPECT_TRUE(first.status().ok());
}

TEST_P(RendezvousConformance, CancellingOneReceiveLeavesTheOthers) {
  RecvResult a, b;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kF32, Shape{1}), a.Callback());
  rendezvous_->RecvAsync(Key("b:0"), Expect(DType::kF32, Shape{1}), b.Callback());
  rendezvous_->CancelRecv(Key("a:0"), Cancelled("the caller gave up on a"));
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.status(), Cancelled("the caller gave up on a"));
  EXPECT_FALSE(b.arrived());
  rendezvous_->CancelRecv(Key("zzz:0"), Cancelled("nobody waits"));  // no effect
  ASSERT_TRUE(rendezvous_->Send(Key("b:0"), {"send_b"}, Values({9})).ok());
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(b.tensor().ToVector<float>(), (std::vector<float>{9}));
  EXPECT_EQ(a.calls(), 1);
}

TEST_P(RendezvousConformance, MismatchedDtypeOrShapeNamesBothNodes) {
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"producer/_send"}, Values({1, 2})).ok());
  RecvResult dtype;
  rendezvous_->RecvAsync(Key("a:0"), Expect(DType::kI32, Shape{2}, "consumer/_recv"),
                         dtype.Callback());
  ASSERT_TRUE(dtype.Wait());
  EXPECT_EQ(dtype.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(dtype.status(), {"consumer/_recv", "producer/_send", "i32", "f32"}));

  RecvResult shape;
  rendezvous_->RecvAsync(Key("b:0"), Expect(DType::kF32, Shape{3}, "other/_recv"),
                         shape.Callback());
  ASSERT_TRUE(rendezvous_->Send(Key("b:0"), {"other/_send"}, Values({1, 2})).ok());
  ASSERT_TRUE(shape.Wait());
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(shape.status(), {"other/_recv", "other/_send", "[3]", "[2]"}));
}

TEST_P(RendezvousConformance, ManyStepsInterleaved) {
  // One rendezvous per step from the factory, and several steps on one rendezvous: every key
  // meets its own value only.
  constexpr int kSteps = 16;
  std::vector<std::unique_ptr<Rendezvous>> steps;
  for (int s = 0; s < kSteps; ++s) {
    auto r = factory_->Create(100 + s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    steps.push_back(std::move(r).value());
  }
  std::vector<std::unique_ptr<RecvResult>> results;
  for (int s = 0; s < kSteps; ++s) {
    for (int t = 0; t < 4; ++t) {
      results.push_back(std::make_unique<RecvResult>());
      Rendezvous* r = s % 2 ? steps[s].get() : rendezvous_.get();
      if ((s + t) % 2) {
        r->RecvAsync(Key("t:" + std::to_string(t), 100 + s), Expect(DType::kF32, Shape{1}),
                     results.back()->Callback());
      }
      ASSERT_TRUE(r->Send(Key("t:" + std::to_string(t), 100 + s), {"send"},
                          Values({static_cast<float>(s * 10 + t)}))
                      .ok());
      if ((s + t) % 2 == 0) {
        r->RecvAsync(Key("t:" + std::to_string(t), 100 + s), Expect(DType::kF32, Shape{1}),
                     results.back()->Callback());
      }
    }
  }
  for (int s = 0; s < kSteps; ++s) {
    for (int t = 0; t < 4; ++t) {
      RecvResult& r = *results[s * 4 + t];
      ASSERT_TRUE(r.Wait());
      ASSERT_TRUE(r.status().ok()) << r.status().ToString();
      EXPECT_EQ(r.tensor().ToVector<float>()[0], static_cast<float>(s * 10 + t));
    }
  }
}

TEST_P(RendezvousConformance, ConcurrentSendersAndReceiversStress) {
  constexpr int kThreads = 4;
  constexpr int kKeys = 2000;
  std::atomic<int> delivered{0}, wrong{0};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 gen(t);
      std::vector<int> order(kKeys / kThreads);
      for (int i = 0; i < static_cast<int>(order.size()); ++i) order[i] = i * kThreads + t;
      std::shuffle(order.begin(), order.end(), gen);
      for (int k : order) {
        // Even threads receive their keys and send their partner's; odd ones the other way.
        bool recv_first = gen() % 2;
        auto recv = [&, k] {
          rendezvous_->RecvAsync(Key("k:" + std::to_string(k)), Expect(DType::kF32, Shape{1}),
                                 [&, k](const Status& s, const Tensor& v) {
                                   if (!s.ok() || v.ToVector<float>()[0] != static_cast<float>(k))
                                     wrong++;
                                   if (++delivered == kKeys) {
                                     std::lock_guard lock(mu);
                                     cv.notify_all();
                                   }
                                 });
        };
        if (recv_first) recv();
        Status s = rendezvous_->Send(Key("k:" + std::to_string(k)), {"send"},
                                     Values({static_cast<float>(k)}));
        if (!s.ok()) wrong++;
        if (!recv_first) recv();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return delivered == kKeys; }))
      << delivered << " of " << kKeys << " delivered";
  EXPECT_EQ(wrong.load(), 0);
}

// A callback may use the rendezvous again (a Recv's completion starts the next Send), whether
// it runs at once or later, and whether it carries a tensor or an error.
TEST_P(RendezvousConformance, CallbacksMayUseTheRendezvousAgain) {
  RecvResult chained, after_dup;
  Rendezvous* r = rendezvous_.get();
  rendezvous_->RecvAsync(
      Key("a:0"), Expect(DType::kF32, Shape{1}), [&, r](const Status& s, const Tensor& t) {
        ASSERT_TRUE(s.ok());
        EXPECT_TRUE(r->Send(Key("b:0"), {"relay"}, t).ok());
        r->RecvAsync(Key("b:0"), Expect(DType::kF32, Shape{1}), chained.Callback());
      });
  ASSERT_TRUE(rendezvous_->Send(Key("a:0"), {"send_a"}, Values({5})).ok());
  ASSERT_TRUE(chained.Wait());
  EXPECT_EQ(chained.tensor().ToVector<float>(), (std::vector<float>{5}));
  RecvResult first;
  rendezvous_->RecvAsync(Key("c:0"), Expect(DType::kF32, Shape{1}), first.Callback());
  rendezvous_->RecvAsync(Key("c:0"), Expect(DType::kF32, Shape{1}),
                         [&, r](const Status& s, const Tensor&) {
                           EXPECT_FALSE(s.ok());  // received twice: refused at once
                           r->CancelRecv(Key("c:0"), Cancelled("relay gave up"));
                         });
  ASSERT_TRUE(first.Wait());
  EXPECT_EQ(first.status(), Cancelled("relay gave up"));
}

TEST_P(RendezvousConformance, AbortRacingWithSendsAndReceivesCallsEachDoneOnce) {
  constexpr int kKeys = 500;
  std::vector<std::unique_ptr<RecvResult>> results(kKeys);
  for (auto& r : results) r = std::make_unique<RecvResult>();
  std::thread receiver([&] {
    for (int k = 0; k < kKeys; ++k) {
      rendezvous_->RecvAsync(Key("k:" + std::to_string(k)), Expect(DType::kF32, Shape{1}),
                             results[k]->Callback());
    }
  });
  std::thread sender([&] {
    for (int k = 0; k < kKeys; ++k) {
      (void)rendezvous_->Send(Key("k:" + std::to_string(k)), {"send"}, Values({1}));
    }
  });
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  rendezvous_->Abort(Cancelled("stop"));
  receiver.join();
  sender.join();
  for (auto& r : results) {
    ASSERT_TRUE(r->Wait());
    EXPECT_EQ(r->calls(), 1);
    EXPECT_TRUE(r->status().ok() || r->status() == Cancelled("stop")) << r->status().ToString();
  }
}

}  // namespace dflow::testing
