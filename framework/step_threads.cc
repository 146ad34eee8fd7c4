#include "framework/step_threads.h"

#include <pthread.h>

#include "framework/spin_wait.h"

namespace dflow {

StepThreads::StepThreads(std::string name, std::function<void()> on_start, int64_t poll_ns)
    : name_(std::move(name)), on_start_(std::move(on_start)), poll_ns_(poll_ns) {}

StepThreads::~StepThreads() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& w : workers_) w->cv.NotifyAll();
    workers.swap(workers_);
  }
  for (auto& w : workers) w->thread.join();
}

void StepThreads::Run(std::function<void()> task, std::function<void()> then) {
  MutexLock lock(mu_);
  Worker* w = nullptr;
  if (!idle_.empty()) {
    w = idle_.back();
    idle_.pop_back();
  } else {
    workers_.push_back(std::make_unique<Worker>());
    w = workers_.back().get();
    w->thread = std::thread([this, w] { Loop(w); });
  }
  w->task = std::move(task);
  w->then = std::move(then);
  w->idle = false;
  w->has_task.store(true, std::memory_order_release);
  lock.Unlock();
  w->cv.NotifyOne();
}

int StepThreads::num_threads() const {
  MutexLock lock(mu_);
  return static_cast<int>(workers_.size());
}

void StepThreads::Loop(Worker* w) {
  // Thread names are limited to 15 characters.
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  if (on_start_) on_start_();
  MutexLock lock(mu_);
  for (;;) {
    if (w->idle && !stopping_ && poll_ns_ > 0) {
      // Steps come back to back: poll a little before sleeping.
      lock.Unlock();
      SpinFor([w] { return w->has_task.load(std::memory_order_acquire); }, poll_ns_);
      lock.Lock();
    }
    w->cv.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return !w->idle || stopping_; });
    if (w->idle) return;  // stopping with nothing to do
    std::function<void()> task = std::move(w->task);
    std::function<void()> then = std::move(w->then);
    lock.Unlock();
    task();
    task = nullptr;  // drop what it captured before the step may end
    lock.Lock();
    w->idle = true;
    w->has_task.store(false, std::memory_order_relaxed);
    idle_.push_back(w);
    if (then) {
      lock.Unlock();
      then();
      then = nullptr;
      lock.Lock();
    }
    if (stopping_) return;
  }
}

}  // namespace dflow
