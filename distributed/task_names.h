// TaskNames: a master's names for its workers against the names the workers answer to.
//
// A worker takes the task name of the first master that connects to it and keeps it for life;
// the next master may list the same workers in another order, so its "/job:worker/task:0" can
// be the worker that calls itself task:1. The master plans, places and reports under its own
// names (the ones its cluster spec gives), and speaks to the workers under theirs: calls go to
// a worker's own name, partition graphs name its own devices (a DeviceSet of its names,
// DistributedSession's wire set), and what a worker says (device lists, links, traces, errors)
// is read back into the master's names. With one master the two are the same.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace dflow::distributed {

class TaskNames {
 public:
  // `mine` is the master's name for the worker that answers to `theirs`. FailedPrecondition
  // when two of the master's tasks answer to one name (workers named by different masters).
  Status Add(const std::string& mine, const std::string& theirs);

  // The worker's own task for the master's `task` (unchanged when unknown).
  const std::string& Theirs(const std::string& task) const;
  // The master's task for a worker's own `task` (unchanged when unknown).
  const std::string& Mine(const std::string& task) const;
  // A device name with its task part renamed either way ("/job:worker/task:1/device:CPU:0").
  std::string TheirDevice(const std::string& device) const;
  std::string MyDevice(const std::string& device) const;
  // `text` with every worker's own task name the master's, all at once (so swapped names stay
  // swapped): a worker's error message, read by the master's user.
  std::string MyText(std::string_view text) const;
  Status MyStatus(const Status& s) const;

  // Whether some worker answers to a name other than the master's for it.
  bool renamed() const { return renamed_; }

 private:
  static std::string Rename(const std::string& device, const std::map<std::string, std::string>& m);
  std::map<std::string, std::string> theirs_;  // mine -> theirs
  std::map<std::string, std::string> mine_;    // theirs -> mine
  bool renamed_ = false;
};

}  // namespace dflow::distributed
