#include "ops/cpu/cpu_device.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace dflow {

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
    pool_ = std::make_unique<ThreadPool>(split.inter_op_threads - 1,
                                         [intra] { omp_set_num_threads(intra); });
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
