#include "framework/thread_pool.h"

namespace dflow {

ThreadPool::ThreadPool(int num_threads, std::function<void()> on_start) {
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this, on_start] { WorkerLoop(on_start); });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.NotifyOne();
}

void ThreadPool::WorkerLoop(const std::function<void()>& on_start) {
  if (on_start) on_start();
  while (true) {
    std::function<void()> fn;
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [this]() DFLOW_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace dflow
