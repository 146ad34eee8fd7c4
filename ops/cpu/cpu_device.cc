#include "ops/cpu/cpu_device.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

// LLVM's OpenMP runtime (cmake/Dependencies.cmake): how long a team's threads spin after a
// parallel region, set per thread that forks. Absent (null) under GCC's runtime.
extern "C" void kmp_set_blocktime(int milliseconds) __attribute__((weak));

namespace dflow {
namespace {

// How long the OpenMP threads of a CPU device spin after a region before they sleep, where the
// runtime lets it be set (LLVM's): enough to span the gaps between a step's kernels and between
// the steps of a loop, so no region waits for a thread to wake, and short enough that a run
// waiting for a Recv or for its next batch does not hold cores the process's other devices or
// the host's other processes could use. LLVM's default is 200 ms; KMP_BLOCKTIME overrides both.
constexpr int kSpinMilliseconds = 2;

// Sets the spin time of the OpenMP team the calling thread forks, once per thread.
void LimitSpinning() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  if (kmp_set_blocktime != nullptr && std::getenv("KMP_BLOCKTIME") == nullptr) {
    kmp_set_blocktime(kSpinMilliseconds);
  }
}

}  // namespace

size_t PhysicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return size_t{8} << 30;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

CpuDevice::CpuDevice(const DeviceName& name, ThreadBudget::Split split, size_t memory_limit)
    : Device(name), allocator_(MakeAllocator<CpuAllocator>(name.ToString())), split_(split) {
  allocator_->set_limit(memory_limit);
  if (split.inter_op_threads > 1) {
    int intra = split.intra_op_threads;
    pool_ = std::make_unique<ThreadPool>(split.inter_op_threads - 1, [intra] {
      omp_set_num_threads(intra);
      LimitSpinning();
    });
  }
}

Result<std::unique_ptr<CpuDevice>> CpuDevice::Create(const DeviceName& name,
                                                     const DeviceOptions& options) {
  if (!name.fully_specified() || name.type != "CPU") {
    return InvalidArgument("'{}' is not a full CPU device name", name.ToString());
  }
  ASSIGN_OR_RETURN(auto split, options.threads.Resolve());
  const size_t limit = options.memory_limit == 0 ? PhysicalMemoryBytes() : options.memory_limit;
  auto device = std::unique_ptr<CpuDevice>(new CpuDevice(name, split, limit));
  // Large tensors in memfds: a worker of this host reads them where they lie (the transport's
  // tensors by reference) instead of copying them.
  if (options.shareable_memory) device->allocator_->set_shareable(true);
  return device;
}

MemoryStats CpuDevice::memory() const {
  return {allocator_->limit(), allocator_->bytes_in_use(), allocator_->peak_bytes()};
}

int CpuDevice::EnterRun() {
  LimitSpinning();
  int runs = active_runs_.fetch_add(1, std::memory_order_relaxed) + 1;
  int team = std::max(1, split_.intra_op_threads / runs);
  int saved = omp_get_max_threads();
  if (saved != team) omp_set_num_threads(team);
  return saved;
}

void CpuDevice::LeaveRun(int token) {
  active_runs_.fetch_sub(1, std::memory_order_relaxed);
  if (omp_get_max_threads() != token) omp_set_num_threads(token);
}

}  // namespace dflow
