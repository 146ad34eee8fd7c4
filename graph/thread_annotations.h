// Lock annotations: the locking rules written into the types, checked by Clang's
// -Wthread-safety (the clang build turns violations into errors; see cmake/DflowTargets.cmake).
// Other compilers see nothing.
//
//   class Counter {
//    public:
//     void Add(int n) DFLOW_EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       AddLocked(n);
//     }
//
//    private:
//     void AddLocked(int n) DFLOW_REQUIRES(mu_) { total_ += n; }  // REQUIRES: mu_ held
//     Mutex mu_;
//     int total_ DFLOW_GUARDED_BY(mu_) = 0;
//   };
//
// Only dflow::Mutex (graph/mutex.h) is a capability: std::mutex carries no attribute in
// libstdc++, so members guarded by one cannot be checked.
#pragma once

#if defined(__clang__)
#define DFLOW_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define DFLOW_THREAD_ANNOTATION_(x)
#endif

// A type whose objects are locks (dflow::Mutex).
#define DFLOW_CAPABILITY(name) DFLOW_THREAD_ANNOTATION_(capability(name))
// An RAII type that holds capabilities for its scope (dflow::MutexLock).
#define DFLOW_SCOPED_CAPABILITY DFLOW_THREAD_ANNOTATION_(scoped_lockable)

// A member or global read and written only with `x` held.
#define DFLOW_GUARDED_BY(x) DFLOW_THREAD_ANNOTATION_(guarded_by(x))
// A pointer member or global whose pointee is read and written only with `x` held (the pointer
// itself is not guarded).
#define DFLOW_PT_GUARDED_BY(x) DFLOW_THREAD_ANNOTATION_(pt_guarded_by(x))

// Lock order: this mutex is taken after / before the ones named.
#define DFLOW_ACQUIRED_AFTER(...) DFLOW_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define DFLOW_ACQUIRED_BEFORE(...) DFLOW_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))

// A function called with the capabilities held (and leaving them held); also write
// "// REQUIRES: mu_ held" for readers.
#define DFLOW_REQUIRES(...) DFLOW_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// A function called without the capabilities held (it takes them itself).
#define DFLOW_EXCLUDES(...) DFLOW_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// A function that takes / releases the capabilities (`this` when none are named).
#define DFLOW_ACQUIRE(...) DFLOW_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define DFLOW_RELEASE(...) DFLOW_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
// A function that takes the capabilities when it returns `result` (true or false).
#define DFLOW_TRY_ACQUIRE(...) DFLOW_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// A function that returns only when the calling thread holds the capabilities.
#define DFLOW_ASSERT_CAPABILITY(x) DFLOW_THREAD_ANNOTATION_(assert_capability(x))
// A function returning a reference to the capability `x`.
#define DFLOW_RETURN_CAPABILITY(x) DFLOW_THREAD_ANNOTATION_(lock_returned(x))

// Turns the analysis off for one function. Only where it cannot follow the code, with a comment
// saying why.
#define DFLOW_NO_THREAD_SAFETY_ANALYSIS DFLOW_THREAD_ANNOTATION_(no_thread_safety_analysis)
