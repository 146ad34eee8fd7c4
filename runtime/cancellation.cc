#include "runtime/cancellation.h"

#include <vector>

namespace dflow {

void CancellationToken::Cancel(const Status& why) {
  // The callbacks run under the lock, so a run that unregisters afterwards knows none of them
  // is still touching its state.
  MutexLock lock(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  why_ = why.ok() ? Cancelled("the run was cancelled") : why;
  cancelled_.store(true, std::memory_order_release);
  for (auto& [id, fn] : waiting_) fn(why_);
  waiting_.clear();
}

int64_t CancellationToken::Register(std::function<void(const Status&)> on_cancel) {
  Status why;
  {
    MutexLock lock(mu_);
    if (!cancelled_.load(std::memory_order_relaxed)) {
      int64_t id = next_id_++;
      waiting_.emplace(id, std::move(on_cancel));
      return id;
    }
    why = why_;
  }
  on_cancel(why);
  return 0;
}

void CancellationToken::Unregister(int64_t id) {
  MutexLock lock(mu_);
  waiting_.erase(id);
}

bool StepControl::Abort(const Status& status) {
  {
    MutexLock lock(mu_);
    if (!status_.ok()) return false;
    status_ = status.ok() ? Cancelled("the step was aborted") : status;
    aborted_.store(true, std::memory_order_release);
  }
  if (rendezvous_ != nullptr) rendezvous_->Abort(status);
  return true;
}

bool StepControl::ShouldStop() {
  if (aborted_.load(std::memory_order_acquire)) return true;
  if (deadline_ && (checks_.fetch_add(1, std::memory_order_relaxed) & 15) == 15 &&
      Clock::now() >= *deadline_) {
    Expire();
    return true;
  }
  return false;
}

void StepControl::Expire() {
  Abort(DeadlineExceeded("the step did not finish within {} ms", timeout_ ? timeout_->count() : 0));
}

Status StepControl::status() const {
  MutexLock lock(mu_);
  return status_;
}

}  // namespace dflow
