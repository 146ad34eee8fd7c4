#include "distributed/task_names.h"

#include <cctype>

namespace dflow::distributed {

Status TaskNames::Add(const std::string& mine, const std::string& theirs) {
  auto taken = mine_.find(theirs);
  if (taken != mine_.end() && taken->second != mine) {
    return FailedPrecondition(
        "tasks {} and {} both answer as {}: a worker keeps the name the first master to reach "
        "it gave, and different masters gave these two the same one; restart one of them so "
        "that this master names it",
        taken->second, mine, theirs);
  }
  theirs_[mine] = theirs;
  mine_[theirs] = mine;
  renamed_ |= mine != theirs;
  return Status::OK();
}

const std::string& TaskNames::Theirs(const std::string& task) const {
  auto it = theirs_.find(task);
  return it == theirs_.end() ? task : it->second;
}

const std::string& TaskNames::Mine(const std::string& task) const {
  auto it = mine_.find(task);
  return it == mine_.end() ? task : it->second;
}

std::string TaskNames::Rename(const std::string& device,
                              const std::map<std::string, std::string>& m) {
  // The task is the device name up to its third '/' ("/job:J/task:N").
  size_t end = device.find('/', 1);
  if (end != std::string::npos) end = device.find('/', end + 1);
  auto it = m.find(device.substr(0, end));
  if (it == m.end()) return device;
  return end == std::string::npos ? it->second : it->second + device.substr(end);
}

std::string TaskNames::TheirDevice(const std::string& device) const {
  return renamed_ ? Rename(device, theirs_) : device;
}

std::string TaskNames::MyDevice(const std::string& device) const {
  return renamed_ ? Rename(device, mine_) : device;
}

std::string TaskNames::MyText(std::string_view text) const {
  if (!renamed_) return std::string(text);
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    size_t job = text.find("/job:", at);
    if (job == std::string_view::npos) break;
    // "/job:NAME/task:DIGITS", the longest such run.
    size_t i = job + 5;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) ||
                               text[i] == '_' || text[i] == '-' || text[i] == '.')) {
      ++i;
    }
    constexpr std::string_view kTask = "/task:";
    size_t digits = i + kTask.size();
    size_t end = digits;
    if (text.substr(i, kTask.size()) == kTask) {
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    }
    if (end == digits) {  // not a task name: keep it as it is
      out.append(text.substr(at, job + 5 - at));
      at = job + 5;
      continue;
    }
    out.append(text.substr(at, job - at));
    out.append(Mine(std::string(text.substr(job, end - job))));
    at = end;
  }
  out.append(text.substr(at));
  return out;
}

Status TaskNames::MyStatus(const Status& s) const {
  if (s.ok() || !renamed_) return s;
  return Status(s.code(), MyText(s.message()));
}

}  // namespace dflow::distributed
