// ClusterSpec: the tasks of a cluster and where they listen, in the usual JSON form
//   {"worker": ["10.0.0.1:7001", "10.0.0.2:7001"], "ps": ["10.0.0.3:7001"]}
// Task i of job "worker" is "/job:worker/task:i".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace dflow::distributed {

struct ClusterSpec {
  // job -> addresses, by task index. An empty address: no task at that index (a sparse cluster,
  // as ElasticReplicas makes without a lost worker, whose fellows keep their names).
  std::map<std::string, std::vector<std::string>> jobs;

  struct Task {
    std::string name;  // "/job:worker/task:1"
    std::string address;
  };
  // Every task, by job name then index (none for an empty address).
  std::vector<Task> tasks() const;

  // InvalidArgument naming `source` and the entry for: text that is not a JSON object of lists
  // of "HOST:PORT" strings, an empty or malformed job name, an address given twice, no task.
  static Result<ClusterSpec> Parse(std::string_view json, const std::string& source);
  static Result<ClusterSpec> Load(const std::string& path);
};

// The host (the address without its port) of each device's task, for
// ops::ReplicateOptions::hosts; a device without a job and task is on this process's host,
// "localhost". InvalidArgument naming a device that does not parse or whose task the cluster
// lacks.
Result<std::vector<std::string>> ReplicaHosts(const ClusterSpec& cluster,
                                              const std::vector<std::string>& devices);

}  // namespace dflow::distributed
