// A worker's rank among the processes a launcher started (Open MPI's mpirun, Slurm's srun, or
// any PMIx launcher), read from the variables they set, so that `mpirun -np 4 dflow-worker
// --listen HOST:7000 ...` gives four workers on ports 7000 .. 7003.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "graph/status.h"

namespace dflow::tools {

struct LaunchRank {
  int rank = 0;
  int world_size = 1;
  std::string source;  // "Open MPI", "Slurm" or "PMIx"
};

// The rank and world size from OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/SLURM_NTASKS or
// PMIX_RANK/PMIX_SIZE (the first pair present); nullopt when none is set. InvalidArgument naming
// the variable for a value that is not a number, or a rank outside [0, world size).
// `getenv` reads the environment (std::getenv unless a test gives another).
Result<std::optional<LaunchRank>> LaunchRankFromEnvironment(
    const std::function<const char*(const char*)>& getenv = nullptr);

// "HOST:PORT" with PORT + rank; port 0 (any free port) stays 0. InvalidArgument for an address
// without a port, or a port past 65535.
Result<std::string> PortForRank(const std::string& listen, int rank);

}  // namespace dflow::tools
