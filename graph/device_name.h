// DeviceName: names a device, fully or partially.
//
// Canonical form: "/job:worker/task:1/device:GPU:0". Accepted short forms: "gpu:0", "cpu:1",
// "worker:1/gpu:0", "worker/cpu", and partial specs such as "gpu" (any GPU) or "/job:ps"
// (any device of job ps). Device types are CPU, GPU and those a device factory added
// (AddType), case-insensitive on input. A short name of one component is a device ("tpu:0" is
// an error, not job "tpu"); name a job alone with the long form ("/job:ps").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace dflow {

struct DeviceName {
  std::optional<std::string> job;
  std::optional<int> task;
  std::optional<std::string> type;  // "CPU", "GPU", or a type added with AddType
  std::optional<int> index;

  // Parses any accepted form; InvalidArgument quoting the name and saying what is wrong.
  // An empty string is the fully unspecified name (matches any device).
  static Result<DeviceName> Parse(std::string_view name);
  // Makes `type` (2 to 8 capital letters) a device type that names may use from now on, for a
  // device type beyond CPU and GPU (framework/device_factory.h calls it). InvalidArgument naming
  // the type when it is not of that form; adding a known type again changes nothing.
  static Status AddType(std::string_view type);
  // A full name: job, task, type and index all set.
  static DeviceName Full(std::string job, int task, std::string type, int index);

  bool fully_specified() const { return job && task && type && index; }
  bool empty() const { return !job && !task && !type && !index; }
  // True when every part set here equals the same part of `device`.
  bool Matches(const DeviceName& device) const;
  // This name with unset job and task filled in (defaults: job "localhost", task 0).
  DeviceName WithDefaults(std::string_view job = "localhost", int task = 0) const;

  // Canonical string of the parts that are set: "/job:worker/task:1/device:GPU:0",
  // "/device:GPU:*" for any GPU, "" for the empty name.
  std::string ToString() const;
  // Short form: "gpu:0", "worker:1/gpu:0".
  std::string ShortString() const;

  bool operator==(const DeviceName&) const = default;
};

// The task a device belongs to: "/job:worker/task:1/device:CPU:0" -> "/job:worker/task:1" (the
// name processes know each other by). InvalidArgument when the name has no job or task.
Result<std::string> TaskOfDevice(std::string_view device);
// True for a task's name, "/job:NAME/task:N", and nothing else.
bool IsTaskName(std::string_view task);

}  // namespace dflow
