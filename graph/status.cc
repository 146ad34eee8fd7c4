#include "graph/status.h"

#include <cstdio>
#include <cstdlib>

namespace dflow {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", StatusCodeName(code()), message());
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code(), fmt::format("{}{}", prefix, message()));
}

namespace internal {
void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "dflow: check failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}
}  // namespace internal

}  // namespace dflow
