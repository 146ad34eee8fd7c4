// Mutex, MutexLock, CondVar: std::mutex and std::condition_variable with the lock annotations
// of graph/thread_annotations.h, so Clang checks that guarded state is touched only under its
// lock. Each is a thin inline wrapper: no cost over the std types.
//
//   Mutex mu_;
//   CondVar cv_;
//   std::deque<Task> queue_ DFLOW_GUARDED_BY(mu_);
//
//   Task Take() DFLOW_EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return !queue_.empty(); });
//     Task t = std::move(queue_.front());
//     queue_.pop_front();
//     return t;
//   }
//
// A lambda that reads guarded state runs as a function of its own: mark it
// DFLOW_REQUIRES(mu) when it is called with the lock held (a CondVar predicate), or take the
// lock inside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "graph/thread_annotations.h"

namespace dflow {

// A non-recursive mutex. Lock/Unlock, or lock/unlock for std algorithms; prefer MutexLock.
class DFLOW_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() DFLOW_ACQUIRE() { mu_.lock(); }
  void Unlock() DFLOW_RELEASE() { mu_.unlock(); }
  bool TryLock() DFLOW_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // The std::BasicLockable spellings.
  void lock() DFLOW_ACQUIRE() { mu_.lock(); }
  void unlock() DFLOW_RELEASE() { mu_.unlock(); }
  bool try_lock() DFLOW_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that the calling thread holds the mutex; checks nothing at run time.
  void AssertHeld() const DFLOW_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  friend class MutexLocks;
  std::mutex mu_;
};

// Holds a mutex from construction to the end of the scope. Unlock() and Lock() release and
// retake it in the middle (the scope must end holding it or not, as after the last call); the
// destructor releases it only when held.
class DFLOW_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) DFLOW_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() DFLOW_RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // REQUIRES: held.
  void Unlock() DFLOW_RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  // REQUIRES: not held.
  void Lock() DFLOW_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Holds two to four mutexes for the scope, taken together without deadlock whatever order other
// threads take them in (std::lock's algorithm, as std::scoped_lock does). REQUIRES: distinct
// mutexes.
class DFLOW_SCOPED_CAPABILITY MutexLocks {
 public:
  MutexLocks(Mutex& a, Mutex& b) DFLOW_ACQUIRE(a, b) : mus_{&a, &b} { std::lock(a.mu_, b.mu_); }
  MutexLocks(Mutex& a, Mutex& b, Mutex& c) DFLOW_ACQUIRE(a, b, c) : mus_{&a, &b, &c} {
    std::lock(a.mu_, b.mu_, c.mu_);
  }
  MutexLocks(Mutex& a, Mutex& b, Mutex& c, Mutex& d) DFLOW_ACQUIRE(a, b, c, d)
      : mus_{&a, &b, &c, &d} {
    std::lock(a.mu_, b.mu_, c.mu_, d.mu_);
  }
  ~MutexLocks() DFLOW_RELEASE() {
    for (Mutex* mu : mus_) {
      if (mu != nullptr) mu->mu_.unlock();
    }
  }
  MutexLocks(const MutexLocks&) = delete;
  MutexLocks& operator=(const MutexLocks&) = delete;

 private:
  Mutex* mus_[4] = {};
};

// A condition variable used with a Mutex. Every wait REQUIRES the mutex held by the caller, as
// by a MutexLock: it is released while waiting and held again on return. A predicate is called
// with the mutex held; annotate a lambda predicate DFLOW_REQUIRES(mu) when it reads guarded
// state.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // The waits below are not analysed: the predicate's own DFLOW_REQUIRES names the caller's
  // mutex in the caller's terms, which the analysis cannot match to `mu` here.

  // May return spuriously.
  void Wait(Mutex& mu) DFLOW_REQUIRES(mu) {
    Adopted held(mu);
    cv_.wait(held.lock);
  }
  // Returns once pred() is true.
  template <typename Pred>
  void Wait(Mutex& mu, Pred pred) DFLOW_REQUIRES(mu) DFLOW_NO_THREAD_SAFETY_ANALYSIS {
    Adopted held(mu);
    while (!pred()) cv_.wait(held.lock);
  }
  // Returns pred(): false when `timeout` passed first.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout, Pred pred)
      DFLOW_REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, std::move(pred));
  }
  // Returns pred(): false when `deadline` passed first.
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline, Pred pred)
      DFLOW_REQUIRES(mu) DFLOW_NO_THREAD_SAFETY_ANALYSIS {
    Adopted held(mu);
    while (!pred()) {
      if (cv_.wait_until(held.lock, deadline) == std::cv_status::timeout) return pred();
    }
    return true;
  }

  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

 private:
  // Lends the caller's lock to std::condition_variable for one wait, and gives it back (held)
  // however the wait ends, a throwing predicate included.
  struct Adopted {
    explicit Adopted(Mutex& mu) : lock(mu.mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    std::unique_lock<std::mutex> lock;
  };

  std::condition_variable cv_;
};

}  // namespace dflow
