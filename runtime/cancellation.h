// Cancelling runs from another thread, and the state one step shares across its devices.
//
//   CancellationToken cancel;
//   std::thread t([&] { session->Run(feeds, fetches, {}, {.cancellation = &cancel}); });
//   cancel.Cancel();  // the run ends soon with Cancelled
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "framework/rendezvous.h"
#include "graph/mutex.h"
#include "graph/status.h"

namespace dflow {

// A handle the caller keeps to cancel the runs given it, from any thread. Cancel() is sticky:
// runs started with a cancelled token fail at once. Thread-safe; it must outlive those runs.
class CancellationToken {
 public:
  // Aborts every run using the token with `why` (Cancelled when OK).
  void Cancel(const Status& why = Status::OK()) DFLOW_EXCLUDES(mu_);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // For the runtime: calls `on_cancel` now (returning 0) when already cancelled; otherwise
  // registers it and returns an id for Unregister. Once Unregister returns, `on_cancel` is not
  // running and will not run. `on_cancel` must not call back into the token.
  int64_t Register(std::function<void(const Status&)> on_cancel) DFLOW_EXCLUDES(mu_);
  void Unregister(int64_t id) DFLOW_EXCLUDES(mu_);

 private:
  std::atomic<bool> cancelled_{false};
  Mutex mu_;
  Status why_ DFLOW_GUARDED_BY(mu_);
  int64_t next_id_ DFLOW_GUARDED_BY(mu_) = 1;
  std::map<int64_t, std::function<void(const Status&)>> waiting_ DFLOW_GUARDED_BY(mu_);
};

// What the partitions of one step share: the first error, the abort flag every executor checks
// before starting a node, the deadline, and the rendezvous that an abort fails. Thread-safe.
class StepControl {
 public:
  using Clock = std::chrono::steady_clock;
  // `timeout`, when set, starts counting now.
  StepControl(int64_t step_id, std::optional<std::chrono::milliseconds> timeout,
              Rendezvous* rendezvous)
      : step_id_(step_id),
        timeout_(timeout),
        deadline_(timeout ? std::optional(Clock::now() + *timeout) : std::nullopt),
        rendezvous_(rendezvous) {}

  int64_t step_id() const { return step_id_; }
  Rendezvous* rendezvous() const { return rendezvous_; }
  const std::optional<Clock::time_point>& deadline() const { return deadline_; }

  // The first call keeps `status` as the step's error, sets the abort flag and aborts the
  // rendezvous (failing every pending Recv); later calls change nothing. Returns true for the
  // first call.
  bool Abort(const Status& status) DFLOW_EXCLUDES(mu_);
  // True once aborted. Also aborts with DeadlineExceeded when the deadline has passed (checked
  // against the clock only every few calls, so it stays cheap per node).
  bool ShouldStop();
  // Aborts with DeadlineExceeded (a waiter saw the deadline pass).
  void Expire();
  Status status() const DFLOW_EXCLUDES(mu_);

 private:
  const int64_t step_id_;
  const std::optional<std::chrono::milliseconds> timeout_;
  const std::optional<Clock::time_point> deadline_;
  Rendezvous* const rendezvous_;
  std::atomic<bool> aborted_{false};
  std::atomic<uint32_t> checks_{0};  // spaces out clock reads
  mutable Mutex mu_;
  Status status_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
