#include "runtime/device.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace dflow {

Result<ThreadBudget::Split> ThreadBudget::Resolve() const {
  if (num_threads < 0) return InvalidArgument("num_threads is {}; it must be >= 0", num_threads);
  if (inter_op_threads < 0) {
    return InvalidArgument("inter_op_threads is {}; it must be >= 0", inter_op_threads);
  }
  Split s;
  s.num_threads = num_threads > 0
                      ? num_threads
                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  s.inter_op_threads = inter_op_threads > 0 ? inter_op_threads : 1;
  if (s.inter_op_threads > s.num_threads) {
    return InvalidArgument("inter_op_threads ({}) exceeds the thread budget num_threads ({})",
                           s.inter_op_threads, s.num_threads);
  }
  s.intra_op_threads = std::max(1, s.num_threads / s.inter_op_threads);
  return s;
}

CpuDevice::CpuDevice(const DeviceName& name, ThreadBudget::Split split)
    : Device(name), allocator_(MakeAllocator<CpuAllocator>(name.ToString())), split_(split) {
  if (split.inter_op_threads > 1) {
    int intra = split.intra_op_threads;
    pool_ = std::make_unique<ThreadPool>(split.inter_op_threads - 1,
                                         [intra] { omp_set_num_threads(intra); });
  }
}

Result<std::unique_ptr<CpuDevice>> CpuDevice::Create(const DeviceName& name,
                                                     const ThreadBudget& budget) {
  if (!name.fully_specified() || name.type != "CPU") {
    return InvalidArgument("'{}' is not a full CPU device name", name.ToString());
  }
  ASSIGN_OR_RETURN(auto split, budget.Resolve());
  return std::unique_ptr<CpuDevice>(new CpuDevice(name, split));
}

}  // namespace dflow
