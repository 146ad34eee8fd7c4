// ThreadPool: a fixed set of threads running scheduled closures. Used by the executor for
// expensive ready nodes only; cheap nodes never pay a hand-off.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "graph/mutex.h"

namespace dflow {

class ThreadPool {
 public:
  // Starts `num_threads` threads; each runs `on_start` once before taking work.
  ThreadPool(int num_threads, std::function<void()> on_start = nullptr);
  // Runs the work already scheduled, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn) DFLOW_EXCLUDES(mu_);
  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop(const std::function<void()>& on_start) DFLOW_EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ DFLOW_GUARDED_BY(mu_);
  bool stopping_ DFLOW_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dflow
