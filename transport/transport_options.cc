#include "transport/transport_options.h"

#include <cstdio>

#include "graph/device_name.h"

namespace dflow::transport {

Status CheckTransportOptions(const TransportOptions& options) {
  if (!options.task.empty() && !IsTaskName(options.task)) {
    return InvalidArgument("task '{}' is not of the form /job:NAME/task:N", options.task);
  }
  if (options.token.size() > kMaxTokenBytes) {
    return InvalidArgument("the cluster token is {} bytes; at most {}", options.token.size(),
                           kMaxTokenBytes);
  }
  if (options.connect_timeout.count() <= 0) {
    return InvalidArgument("connect_timeout must be positive");
  }
  return Status::OK();
}

void LogTransportLine(const TransportOptions& options, const std::string& task,
                      std::string_view line) {
  if (options.log) {
    options.log(line);
    return;
  }
  std::fprintf(stderr, "dflow transport [%s]: %.*s\n", task.empty() ? "unnamed" : task.c_str(),
               static_cast<int>(line.size()), line.data());
}

}  // namespace dflow::transport
