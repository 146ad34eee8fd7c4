// UcxTransportOptions: how a UcxTransport (transport/ucx/ucx_transport.h) reaches its peers.
#pragma once

#include <cstddef>

#include "transport/transport.h"

namespace dflow::transport {

// TransportOptions' listen_address is "host:port" here. Every peer is sent a heartbeat six times
// per peer_timeout, and while a large tensor is being received (which delays what follows it on
// the same connection) the timeout grows by its bytes at 50 MB/s: this is how a link that goes
// down, which TCP reports only after minutes, fails the steps within two seconds.
struct UcxTransportOptions : TransportOptions {
  // Reach peers on this host through shared memory (UCX's sysv/posix transports) rather than
  // TCP over loopback; UCX picks per peer. The environment's UCX_MM_ERROR_HANDLING, when set,
  // decides instead (=n keeps such peers on TCP, as between two hosts).
  bool shared_memory = true;
  // Between processes of this host, tensors of this many bytes or more travel by reference:
  // the receiver reads them where they lie when they are in a memfd of the sender (a worker's
  // allocator makes its large blocks memfds, CpuAllocator::set_shareable) and it may map it
  // (/proc/PID/fd, the same user), or else copies them straight out of the sender's memory,
  // once (process_vm_readv: the same user, unless Yama's ptrace_scope forbids it, or
  // CAP_SYS_PTRACE), and tells the sender when it may free them (UCX's shared memory copies a
  // tensor three times, in 8 KiB fragments, through two progress threads). What a peer allows
  // is tried when it connects (a probe); otherwise, and with 0 here on either side, tensors go
  // through UCX. Needs shared_memory. The environment's DFLOW_BY_REFERENCE_BYTES, when set,
  // decides instead.
  size_t by_reference_bytes = 64 << 10;
  // A step's thread that waits for a Recv polls the UCX worker itself (framework/progress.h) and
  // the progress thread parks meanwhile, as MPI's ranks poll: the tensor then arrives without
  // a hand-off between threads (a wake-up, 10 to 50 us on a small virtual machine, twice per
  // hop of a ring all-reduce). Off: only the progress thread touches the worker.
  bool polled_by_steps = true;
};

}  // namespace dflow::transport
