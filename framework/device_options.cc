#include "framework/device_options.h"

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

}  // namespace dflow
