// What a device is made with: its share of this machine's cores (ThreadBudget) and its memory.
//
// The thread budget. oneDNN here runs its kernels on OpenMP, and every thread that runs a kernel
// starts its own OpenMP team, so the executor's threads and the OpenMP teams multiply. dflow
// splits the cores the user allows (num_threads, default: all) deliberately:
//   inter_op_threads  threads that run independent nodes at once (the thread running the
//                     partition counts as one; the rest form the device's pool). Default 1:
//                     dense kernels scale well inside oneDNN, and cheap nodes run inline anyway.
//   intra_op_threads  the OpenMP team size of each of them = num_threads / inter_op_threads.
// So inter_op_threads * intra_op_threads <= num_threads always holds. Concurrent runs on one
// device share it (ops/cpu/cpu_device.h). A graph with many independent mid-sized nodes may run
// faster with inter_op_threads = 2 or more.
#pragma once

#include <cstddef>

#include "graph/status.h"

namespace dflow {

struct ThreadBudget {
  int num_threads = 0;       // 0: every core of the machine
  int inter_op_threads = 0;  // 0: 1

  // The budget with defaults filled in and the split computed. InvalidArgument for negative
  // values or more inter-op threads than cores.
  struct Split {
    int num_threads;
    int inter_op_threads;
    int intra_op_threads;
  };
  Result<Split> Resolve() const;
};

struct DeviceOptions {
  ThreadBudget threads;     // the device's share of the host's cores
  size_t memory_limit = 0;  // bytes; 0: the device type's default (CPU: physical memory)
  // Large blocks of host memory in memfds that other processes of this host may map (a worker's
  // devices: its tensors then go to workers of this host by reference, transport/ucx/). Device
  // types whose memory is not host memory ignore it.
  bool shareable_memory = false;
};

}  // namespace dflow
