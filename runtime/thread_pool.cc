#include "runtime/thread_pool.h"

namespace dflow {

ThreadPool::ThreadPool(int num_threads, std::function<void()> on_start) {
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this, on_start] { WorkerLoop(on_start); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop(const std::function<void()>& on_start) {
  if (on_start) on_start();
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace dflow
