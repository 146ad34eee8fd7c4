// SpinThenWait: waits for a condition by polling it for a short while before blocking. A thread
// woken from a futex here takes 10 to 30 us to run again; a step whose devices hand work to each
// other every few microseconds would spend most of its time waking up. Polling for up to
// kSpinNs first keeps those hand-offs at a few hundred nanoseconds, and costs at most that much
// CPU per wait when the condition is slow to come.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace dflow {

inline constexpr int64_t kSpinNs = 50'000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` (a cheap, thread-safe check) for up to `ns`. True when it became true.
template <typename Ready>
bool SpinFor(Ready&& ready, int64_t ns = kSpinNs) {
  if (ready()) return true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  for (int i = 1;; ++i) {
    for (int k = 0; k < 64; ++k) CpuRelax();
    if (ready()) return true;
    if ((i & 15) == 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::yield();  // let a thread on this core make the condition true
    }
  }
}

}  // namespace dflow
