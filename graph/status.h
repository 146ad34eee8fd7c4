// Status and Result<T>: how every dflow module reports success or failure.
//
// A Status is OK or carries a code and a message. Messages name what is concerned (the node,
// device or file), so the first error of a run can reach the user unchanged. OK costs nothing:
// it holds no allocation. Result<T> is a value or a non-OK Status.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dflow {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kCancelled,
  kDeadlineExceeded,
  kInternal,
  kUnimplemented,
  kPermissionDenied,  // e.g. a peer that presented the wrong cluster token
};
inline constexpr int kMaxStatusCode = static_cast<int>(StatusCode::kPermissionDenied);

// "InvalidArgument", "NotFound", ...
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "<Code>: <message>".
  std::string ToString() const;

  // A copy whose message is "<prefix><message>"; OK stays OK.
  Status WithPrefix(std::string_view prefix) const;

  bool operator==(const Status& other) const {
    return code() == other.code() && message() == other.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null means OK; shared so copies are cheap
};

// Named factories, formatting their message with fmt.
#define DFLOW_STATUS_FACTORY(Name)                                                        \
  template <typename... Args>                                                             \
  Status Name(fmt::format_string<Args...> format, Args&&... args) {                       \
    return Status(StatusCode::k##Name, fmt::format(format, std::forward<Args>(args)...)); \
  }
DFLOW_STATUS_FACTORY(InvalidArgument)
DFLOW_STATUS_FACTORY(NotFound)
DFLOW_STATUS_FACTORY(FailedPrecondition)
DFLOW_STATUS_FACTORY(ResourceExhausted)
DFLOW_STATUS_FACTORY(Unavailable)
DFLOW_STATUS_FACTORY(Cancelled)
DFLOW_STATUS_FACTORY(DeadlineExceeded)
DFLOW_STATUS_FACTORY(Internal)
DFLOW_STATUS_FACTORY(Unimplemented)
DFLOW_STATUS_FACTORY(PermissionDenied)
#undef DFLOW_STATUS_FACTORY

// A value of type T or the Status saying why there is none. Never holds an OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dflow

#define DFLOW_CONCAT_INNER(a, b) a##b
#define DFLOW_CONCAT(a, b) DFLOW_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::dflow::Status dflow_status_ = (expr);        \
    if (!dflow_status_.ok()) return dflow_status_; \
  } while (0)

// Evaluates a Result<T> expression; on error returns its Status, else moves the value into lhs.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(DFLOW_CONCAT(dflow_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

// Aborts with a message: for programmer errors only, never for user input.
#define DFLOW_CHECK(cond)                                                   \
  do {                                                                      \
    if (!(cond)) ::dflow::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

namespace dflow::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace dflow::internal
