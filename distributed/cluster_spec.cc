#include "distributed/cluster_spec.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "graph/device_name.h"

namespace dflow::distributed {

std::vector<ClusterSpec::Task> ClusterSpec::tasks() const {
  std::vector<Task> out;
  for (const auto& [job, addresses] : jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (addresses[i].empty()) continue;  // no task there
      out.push_back({"/job:" + job + "/task:" + std::to_string(i), addresses[i]});
    }
  }
  return out;
}

Result<ClusterSpec> ClusterSpec::Parse(std::string_view text, const std::string& source) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument(
        "{}: a cluster spec is a JSON object of jobs, e.g. "
        "{{\"worker\": [\"127.0.0.1:7001\"]}}",
        source);
  }
  ClusterSpec spec;
  std::set<std::string> seen;
  for (auto& [job, list] : json.items()) {
    if (job.empty() || job.find_first_of("/: ") != std::string::npos) {
      return InvalidArgument("{}: '{}' is not a job name", source, job);
    }
    if (!list.is_array()) return InvalidArgument("{}: job '{}' is not a list", source, job);
    for (const auto& a : list) {
      if (!a.is_string()) {
        return InvalidArgument("{}: job '{}' lists a non-string address", source, job);
      }
      std::string address = a.get<std::string>();
      size_t colon = address.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
        return InvalidArgument("{}: job '{}': address '{}' is not HOST:PORT", source, job, address);
      }
      if (!seen.insert(address).second) {
        return InvalidArgument("{}: address '{}' is given twice", source, address);
      }
      spec.jobs[job].push_back(address);
    }
  }
  if (seen.empty()) return InvalidArgument("{}: the cluster has no task", source);
  return spec;
}

Result<ClusterSpec> ClusterSpec::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read the cluster spec '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

Result<std::vector<std::string>> ReplicaHosts(const ClusterSpec& cluster,
                                              const std::vector<std::string>& devices) {
  std::vector<std::string> hosts;
  for (const std::string& device : devices) {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(device));
    if (!name.job || !name.task) {
      hosts.push_back("localhost");
      continue;
    }
    auto job = cluster.jobs.find(*name.job);
    if (job == cluster.jobs.end() || *name.task < 0 ||
        *name.task >= static_cast<int>(job->second.size()) || job->second[*name.task].empty()) {
      return InvalidArgument("ReplicaHosts: the cluster has no task for device '{}'", device);
    }
    const std::string& address = job->second[*name.task];
    hosts.push_back(address.substr(0, address.rfind(':')));
  }
  return hosts;
}

}  // namespace dflow::distributed
