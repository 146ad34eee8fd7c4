#include "graph/device_name.h"

#include <cctype>
#include <charconv>
#include <set>
#include <vector>

#include "graph/mutex.h"

namespace dflow {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

std::optional<int> ParseIndex(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// The device types beyond CPU and GPU that AddDeviceType made known.
struct ExtraTypes {
  Mutex mu;
  std::set<std::string, std::less<>> types DFLOW_GUARDED_BY(mu);
};
ExtraTypes& Extra() {
  static ExtraTypes* extra = new ExtraTypes;
  return *extra;
}

std::string Upper(std::string_view s) {
  std::string upper;
  for (char c : s) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

std::optional<std::string> ParseType(std::string_view s) {
  std::string upper = Upper(s);
  if (upper == "CPU" || upper == "GPU") return upper;
  ExtraTypes& extra = Extra();
  MutexLock lock(extra.mu);
  if (extra.types.count(upper) != 0) return upper;
  return std::nullopt;
}

// "CPU or GPU", or "CPU, GPU or XPU" with the types added.
std::string KnownTypes() {
  std::vector<std::string> all = {"CPU", "GPU"};
  {
    ExtraTypes& extra = Extra();
    MutexLock lock(extra.mu);
    all.insert(all.end(), extra.types.begin(), extra.types.end());
  }
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
  }
  return s;
}

bool ValidJob(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

class Parser {
 public:
  explicit Parser(std::string_view name) : name_(name) {}

  Status Error(std::string_view why) const {
    return InvalidArgument("malformed device name '{}': {}", name_, why);
  }

  // "TYPE" or "TYPE:N" or "TYPE:*".
  Status Device(std::string_view type, std::optional<std::string_view> index) {
    if (out.type) return Error("device type given twice");
    out.type = ParseType(type);
    if (!out.type)
      return Error(fmt::format("unknown device type '{}' (expected {})", type, KnownTypes()));
    if (index && *index != "*") {
      out.index = ParseIndex(*index);
      if (!out.index) return Error(fmt::format("bad device index '{}'", *index));
    }
    return Status::OK();
  }

  Status Long() {
    auto parts = Split(name_.substr(1), '/');
    for (auto part : parts) {
      auto fields = Split(part, ':');
      std::string_view key = fields[0];
      if (key == "job" && fields.size() == 2) {
        if (out.job) return Error("job given twice");
        if (!ValidJob(fields[1])) return Error(fmt::format("bad job name '{}'", fields[1]));
        out.job = std::string(fields[1]);
      } else if (key == "task" && fields.size() == 2) {
        if (out.task) return Error("task given twice");
        out.task = ParseIndex(fields[1]);
        if (!out.task) return Error(fmt::format("bad task '{}'", fields[1]));
      } else if (key == "device" && (fields.size() == 2 || fields.size() == 3)) {
        RETURN_IF_ERROR(
            Device(fields[1], fields.size() == 3 ? std::optional(fields[2]) : std::nullopt));
      } else if (ParseType(key) && fields.size() <= 2) {
        RETURN_IF_ERROR(Device(key, fields.size() == 2 ? std::optional(fields[1]) : std::nullopt));
      } else {
        return Error(fmt::format("unexpected component '{}'", part));
      }
    }
    return Status::OK();
  }

  Status Short() {
    auto parts = Split(name_, '/');
    if (parts.size() > 2) return Error("too many components for a short name");
    for (size_t i = 0; i < parts.size(); ++i) {
      auto fields = Split(parts[i], ':');
      if (fields.size() > 2) return Error(fmt::format("too many ':' in '{}'", parts[i]));
      std::optional<std::string_view> second =
          fields.size() == 2 ? std::optional(fields[1]) : std::nullopt;
      if (ParseType(fields[0])) {
        if (i + 1 != parts.size()) return Error("the device must come last");
        RETURN_IF_ERROR(Device(fields[0], second));
      } else {
        // A lone component is a device ("gpu:0"); a job comes before one ("worker:1/gpu:0").
        if (i != 0 || parts.size() == 1) {
          return Error(
              fmt::format("unknown device type '{}' (expected {})", fields[0], KnownTypes()));
        }
        if (!ValidJob(fields[0])) return Error(fmt::format("bad job name '{}'", fields[0]));
        out.job = std::string(fields[0]);
        if (second) {
          out.task = ParseIndex(*second);
          if (!out.task) return Error(fmt::format("bad task '{}'", *second));
        }
      }
    }
    return Status::OK();
  }

  DeviceName out;

 private:
  std::string_view name_;
};

}  // namespace

Status DeviceName::AddType(std::string_view type) {
  bool valid = type.size() >= 2 && type.size() <= 8;
  for (char c : type) valid = valid && c >= 'A' && c <= 'Z';
  if (!valid) {
    return InvalidArgument("device type '{}': a type is 2 to 8 capital letters, like GPU", type);
  }
  if (type == "CPU" || type == "GPU") return Status::OK();
  ExtraTypes& extra = Extra();
  MutexLock lock(extra.mu);
  extra.types.emplace(type);
  return Status::OK();
}

Result<DeviceName> DeviceName::Parse(std::string_view name) {
  Parser p(name);
  if (name.empty()) return p.out;
  RETURN_IF_ERROR(name[0] == '/' ? p.Long() : p.Short());
  return p.out;
}

DeviceName DeviceName::Full(std::string job, int task, std::string type, int index) {
  return DeviceName{std::move(job), task, std::move(type), index};
}

bool DeviceName::Matches(const DeviceName& d) const {
  return (!job || job == d.job) && (!task || task == d.task) && (!type || type == d.type) &&
         (!index || index == d.index);
}

DeviceName DeviceName::WithDefaults(std::string_view default_job, int default_task) const {
  DeviceName d = *this;
  if (!d.job) d.job = std::string(default_job);
  if (!d.task) d.task = default_task;
  return d;
}

std::string DeviceName::ToString() const {
  std::string s;
  if (job) s += "/job:" + *job;
  if (task) s += "/task:" + std::to_string(*task);
  if (type) s += "/device:" + *type + ":" + (index ? std::to_string(*index) : "*");
  return s;
}

std::string DeviceName::ShortString() const {
  std::string s;
  if (job) s += *job + (task ? ":" + std::to_string(*task) : "");
  if (type) {
    std::string t;
    for (char c : *type) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!s.empty()) s += "/";
    s += t + (index ? ":" + std::to_string(*index) : "");
  }
  return s;
}

Result<std::string> TaskOfDevice(std::string_view device) {
  ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(device));
  if (!name.job || !name.task) {
    return InvalidArgument("device '{}' names no job and task", device);
  }
  return fmt::format("/job:{}/task:{}", *name.job, *name.task);
}

bool IsTaskName(std::string_view task) {
  auto parsed = TaskOfDevice(std::string(task) + "/device:CPU:0");
  return parsed.ok() && *parsed == task;
}

}  // namespace dflow
