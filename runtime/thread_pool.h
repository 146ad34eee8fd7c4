// ThreadPool: a fixed set of threads running scheduled closures. Used by the executor for
// expensive ready nodes only; cheap nodes never pay a hand-off.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dflow {

class ThreadPool {
 public:
  // Starts `num_threads` threads; each runs `on_start` once before taking work.
  ThreadPool(int num_threads, std::function<void()> on_start = nullptr);
  // Runs the work already scheduled, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);
  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop(const std::function<void()>& on_start);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace dflow
