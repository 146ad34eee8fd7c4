// What a cluster launcher tells the processes it starts, read from the variables it sets: the
// rank, the world size and the rank on this host (Open MPI's mpirun, Slurm's srun, any PMIx
// launcher, torchrun and the like, Kubernetes Indexed Jobs), and where their master is. So
// `srun -n 4 dflow-worker --token-file F` finds its master with no cluster file.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "graph/status.h"

namespace dflow::tools {

// Reads one environment variable (std::getenv unless a test gives another).
using GetEnv = std::function<const char*(const char*)>;

struct LaunchRank {
  int rank = 0;
  int world_size = 0;   // 0: the launcher did not say
  int local_rank = -1;  // among the processes of this host; -1: the launcher did not say
  std::string source;   // "Open MPI", "torchrun-style", "Slurm", "PMIx", "Kubernetes"
  std::string job_id;   // SLURM_JOB_ID, when Slurm started it
};

// The rank from the first of these present (an inner launcher before the one around it: mpirun
// or torchrun inside an sbatch script sees the batch's SLURM_PROCID=0 too):
//   Open MPI        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   torchrun-style  RANK, WORLD_SIZE, LOCAL_RANK
//   Slurm           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (and SLURM_JOB_ID)
//   PMIx            PMIX_RANK, PMIX_SIZE
//   Kubernetes      JOB_COMPLETION_INDEX (an Indexed Job), WORLD_SIZE
// nullopt when none is set. InvalidArgument naming the variable for a value that is not a
// number, or a rank outside [0, world size).
Result<std::optional<LaunchRank>> LaunchRankFromEnvironment(const GetEnv& getenv = nullptr);

// The port a master listens on for its workers when only its host is known (torchrun's
// convention for MASTER_PORT).
inline constexpr int kDefaultMasterPort = 29500;

struct MasterAddress {
  std::string address;  // "HOST:PORT"
  std::string source;   // how it was found, for the log: "MASTER_ADDR and MASTER_PORT", ...
};

// Where this process's master listens, from the environment, when no --master was given:
//   MASTER_ADDR (and MASTER_PORT, else `port`)                 torchrun-style, Kubernetes
//   the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), at `port`   Slurm
// nullopt when neither is set. InvalidArgument naming the variable for a malformed value.
Result<std::optional<MasterAddress>> MasterFromEnvironment(int port,
                                                           const GetEnv& getenv = nullptr);

// The first host of a Slurm host list: "node[03-05,9],login1" -> "node03",
// "rack[1-2]-n[4-5]" -> "rack1-n4". InvalidArgument for an empty list or unbalanced brackets.
Result<std::string> FirstHostOfList(const std::string& nodelist);

// "HOST:PORT" with PORT + rank; port 0 (any free port) stays 0. InvalidArgument for an address
// without a port, or a port past 65535.
Result<std::string> PortForRank(const std::string& listen, int rank);

// The address of this host's interface that reaches `address` ("HOST:PORT"; found by routing, no
// packet is sent), "[...]" around an IPv6 one: where a worker listens by default when it knows
// its master. Unavailable naming the address when it does not resolve or no route leads there.
Result<std::string> LocalHostToward(const std::string& address);

}  // namespace dflow::tools
