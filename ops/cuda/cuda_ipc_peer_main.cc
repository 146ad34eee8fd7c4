// cuda_ipc_peer ORDINAL: reads GPU memory another process exports by CUDA IPC, on requests
// read from stdin, replying on stdout (ops/cuda/cuda_ipc_peer.h). For the CUDA IPC test and
// benchmark.
#include <cstdlib>

#include "ops/cuda/cuda_ipc_peer.h"

int main(int argc, char** argv) {
  const int ordinal = argc > 1 ? std::atoi(argv[1]) : 0;
  return dflow::cuda::RunCudaIpcPeer(ordinal, 0, 1);
}
