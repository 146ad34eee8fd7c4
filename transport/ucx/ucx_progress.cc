// The progress thread and the step threads that poll in its stead (framework/progress.h): work
// posted to the worker, its turns of polling and sleeping, and its lending of the worker.
#include <poll.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <thread>

#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

using namespace internal;

namespace {

// How long the progress thread keeps polling after its last work before it sleeps on the fd.
constexpr auto kSpin = std::chrono::microseconds(500);
// On a host with cores to spare, for how much of that it polls without yielding its core: a
// reply within this window is seen a poll later, where a yield per poll cost 3.5 us of one-way
// latency here. With few cores (this 2-core machine) the processes' other threads need the
// core more: polling 50 us without yielding doubled the master-to-two-workers step overhead.
std::chrono::microseconds HotSpin() {
  return std::thread::hardware_concurrency() >= 8 ? std::chrono::microseconds(50)
                                                  : std::chrono::microseconds(0);
}

// The transport whose worker this thread drives now (it holds progress_mu_), if any.
thread_local const UcxEngine* t_driving = nullptr;

// How long the progress thread parks while step threads poll, at most: heartbeats and the
// calls' deadlines are looked at after it.
constexpr auto kParkTime = std::chrono::milliseconds(1);
}  // namespace

void UcxEngine::Post(std::function<void()> fn) {
  if (t_driving == this) {
    // From a callback under ucp_worker_progress: runs once it returns.
    deferred_.push_back(std::move(fn));
    return;
  }
  {
    MutexLock lock(queue_mu_);
    if (closed_) return;  // the progress thread is gone
    queue_.push_back(std::move(fn));
  }
  // A progress thread that is awake sees posted_ without a wake-up (a system call); one about to
  // sleep checks posted_ after announcing it (both sequentially consistent). One parked while
  // step threads poll leaves the work to them.
  posted_.store(true);
  if (sleeping_.load()) ucp_worker_signal(worker_);
}

bool UcxEngine::RunPosted() {
  std::vector<std::function<void()>> work;
  {
    MutexLock lock(queue_mu_);
    posted_.store(false, std::memory_order_relaxed);
    work.swap(queue_);
  }
  for (auto& fn : work) fn();
  return !work.empty();
}

void UcxEngine::RunDeferred() {
  while (!deferred_.empty()) {
    std::vector<std::function<void()>> work;
    work.swap(deferred_);
    for (auto& fn : work) fn();
  }
}

bool UcxEngine::ProgressOnce() {
  bool busy = RunPosted();
  // What callbacks deferred (often a reply to send) runs before the next poll.
  while (ucp_worker_progress(worker_) != 0) {
    busy = true;
    RunDeferred();
  }
  if (!deferred_.empty()) {
    RunDeferred();
    busy = true;
  }
  if (busy) last_work_ = std::chrono::steady_clock::now();
  return busy;
}

void UcxEngine::BeginPolling() { pollers_.fetch_add(1); }

void UcxEngine::EndPolling() {
  if (pollers_.fetch_sub(1) != 1) return;
  // The last poller leaves: the progress thread takes the worker back at once.
  MutexLock lock(park_mu_);
  parked_cv_.NotifyAll();
}

namespace {
// Marks the calling thread as the one driving `impl`'s worker while it lives.
class Driving {
 public:
  explicit Driving(const UcxEngine* impl) { t_driving = impl; }
  ~Driving() { t_driving = nullptr; }
  Driving(const Driving&) = delete;
  Driving& operator=(const Driving&) = delete;
};
}  // namespace

bool UcxEngine::Poll() {
  if (stop_.load(std::memory_order_relaxed) || !progress_mu_.TryLock()) return false;
  bool busy;
  {
    Driving driving(this);
    busy = ProgressOnce();
  }
  progress_mu_.Unlock();
  if (busy) step_thread_polls_.fetch_add(1, std::memory_order_relaxed);
  return busy;
}

bool UcxEngine::Turn() {
  {
    MutexLock lock(progress_mu_);
    Driving driving(this);
    calls_.Expire();
    if (std::chrono::steady_clock::now() >= next_check_) CheckPeers();
    if (ProgressOnce() || stop_.load()) return false;
  }
  // Idle: poll a little after real work (a reply often comes within microseconds), then sleep
  // on the fd. The worker is held for a poll at a time: a step thread that starts polling takes
  // over, and none waits for this thread to come back from a yield.
  for (;;) {
    if (pollers_.load() > 0) return false;
    MutexLock lock(progress_mu_);
    Driving driving(this);  // what callbacks post waits for the next turn, as anywhere
    const auto now = std::chrono::steady_clock::now();
    if (now >= last_work_ + kSpin) {
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return false;
      sleeping_.store(true);
      if (posted_.load() || pollers_.load() > 0) {
        sleeping_.store(false);
        return false;
      }
      return true;
    }
    if (ucp_worker_progress(worker_) != 0 || posted_.load(std::memory_order_acquire)) {
      return false;  // work: the next turn does it
    }
    if (now > last_work_ + hot_spin_) {
      // Past the hot window a thread of this process or another may need the core more.
      lock.Unlock();
      sched_yield();
    }
  }
}

void UcxEngine::Loop() {
  pthread_setname_np(pthread_self(), "dflow progress");  // as perf and top show it
  hot_spin_ = HotSpin();
  while (!stop_.load()) {
    if (pollers_.load() > 0) {
      // Step threads poll the worker: this thread would only take their core and the worker
      // from them.
      MutexLock lock(park_mu_);
      parked_cv_.WaitFor(park_mu_, kParkTime, [&] { return pollers_.load() == 0 || stop_.load(); });
    }
    if (!Turn()) continue;
    pollfd pfd{efd_, POLLIN, 0};
    poll(&pfd, 1, kMaxSleepMs);
    sleeping_.store(false);
  }
  MutexLock lock(queue_mu_);
  closed_ = true;
  queue_.clear();
}

}  // namespace dflow::transport
