// cuda_ipc_peer ORDINAL: reads GPU memory another process exports by CUDA IPC, on requests
// read from stdin, replying on stdout (tools/cuda_ipc_peer.h). For the CUDA IPC test and
// benchmark.
#include <cstdlib>

#include "tools/cuda_ipc_peer.h"

int main(int argc, char** argv) {
  const int ordinal = argc > 1 ? std::atoi(argv[1]) : 0;
  return dflow::tools::RunCudaIpcPeer(ordinal, 0, 1);
}
