// LocalSlurm: a one-node Slurm cluster of this host for a test, made from a generated
// configuration in a folder of its own: munged with its own key and socket, slurmctld and slurmd
// on free ports, the node named "localhost" (so the first host of a step is this one). Needs root
// and Debian's slurmd, slurmctld, slurm-client and munge (scripts/setup.sh). The destructor stops
// the three daemons and removes the folder, also when the test failed.
#pragma once

#include <string>

#include "graph/status.h"

namespace dflow::testing {

class LocalSlurm {
 public:
  // Starts the daemons and waits (at most 30 s) for the node to be idle. FailedPrecondition
  // naming what is missing (not root, a program not installed); Internal with the daemon's log
  // when one does not come up.
  static Result<std::unique_ptr<LocalSlurm>> Start();
  ~LocalSlurm();

  // The configuration file: SLURM_CONF for srun and sinfo (Start sets it in this process's
  // environment, so the programs a test starts use this cluster).
  const std::string& conf() const { return conf_; }

 private:
  LocalSlurm() = default;
  std::string dir_;
  std::string conf_;
};

// A TCP port of 127.0.0.1 free when asked (a daemon or a master takes it right after).
int FreePort();

}  // namespace dflow::testing
