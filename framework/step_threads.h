// StepThreads: the persistent threads a device runs its partitions of steps on. A step hands a
// partition to an idle thread; a new thread starts only when every thread is busy (concurrent
// steps), and stays for later steps. So a sequence of steps creates no thread after the first,
// and each thread keeps its OpenMP team warm. A partition waiting on a Recv holds its thread, so
// partitions of concurrent steps never queue behind one another (no step can wait on a
// partition that is queued behind it).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graph/mutex.h"

namespace dflow {

class StepThreads {
 public:
  // `on_start` runs once on each new thread before its first task. An idle thread polls for
  // its next task for `poll_ns` before it sleeps (steps that come back to back start within
  // microseconds); 0 where the poll would take a core from the threads that bring the next
  // task (a worker's, whose tasks come from the transport's thread).
  explicit StepThreads(std::string name, std::function<void()> on_start = nullptr,
                       int64_t poll_ns = 50'000);
  // Waits for the running tasks, then joins the threads.
  ~StepThreads();
  StepThreads(const StepThreads&) = delete;
  StepThreads& operator=(const StepThreads&) = delete;

  // Runs `task` on an idle thread, starting one if none is idle, then `then` (when set) once
  // the thread is idle again: a step that waits for `then` finds the thread free for its next
  // step.
  void Run(std::function<void()> task, std::function<void()> then = nullptr) DFLOW_EXCLUDES(mu_);
  // Threads started so far.
  int num_threads() const DFLOW_EXCLUDES(mu_);

 private:
  // The fields marked are guarded by StepThreads::mu_. Clang cannot check that: an attribute in
  // a nested struct cannot name a member of the enclosing object (Clang 14 takes it as the
  // Worker's own).
  struct Worker {
    std::thread thread;
    std::function<void()> task;  // guarded by StepThreads::mu_
    std::function<void()> then;  // guarded by StepThreads::mu_
    bool idle = true;            // guarded by StepThreads::mu_
    // Mirrors !idle for the worker's polling before it sleeps (runtime/spin_wait.h).
    std::atomic<bool> has_task{false};
    CondVar cv;
  };
  void Loop(Worker* w) DFLOW_EXCLUDES(mu_);

  const std::string name_;
  const std::function<void()> on_start_;
  const int64_t poll_ns_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_ DFLOW_GUARDED_BY(mu_);
  std::vector<Worker*> idle_ DFLOW_GUARDED_BY(mu_);  // last idle first
  bool stopping_ DFLOW_GUARDED_BY(mu_) = false;
};

}  // namespace dflow
