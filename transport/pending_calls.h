// PendingCalls: the requests a transport has sent for this process (Transport::CallAsync) and
// waits on, shared by every implementation so that each call ends the same way everywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "graph/mutex.h"
#include "transport/transport.h"

namespace dflow::transport {

// The largest reply any call may bring (a partition's fetches travel in one).
inline constexpr uint64_t kMaxReplyBytes = uint64_t{1} << 30;

// Calls by id. Each ends exactly once: by its answer, its connection's loss, its deadline or the
// transport's end; its `done` then runs on the thread that ended it, outside the table's lock.
// Thread-safe.
class PendingCalls {
 public:
  // A call of `method` to `task` through connection `peer` (a tag the transport chooses, such as
  // its peer's address in memory; null for none) that ends by `timeout`: its id.
  uint64_t Add(const std::string& task, const void* peer, uint16_t method,
               std::chrono::milliseconds timeout, Transport::Reply done) DFLOW_EXCLUDES(mu_);
  // Whether call `id` still waits for an answer through `peer`.
  bool Awaits(uint64_t id, const void* peer) const DFLOW_EXCLUDES(mu_);
  // The most bytes a reply to a call of `method` may have (kMaxReplyBytes when not set).
  void SetReplyLimit(uint16_t method, uint64_t bytes) DFLOW_EXCLUDES(mu_);
  // The reply limit of call `id` when it still waits through `peer`; nullopt when it does not
  // (a transport checks a reply's size before it takes the bytes in).
  std::optional<uint64_t> ReplyRoom(uint64_t id, const void* peer) const DFLOW_EXCLUDES(mu_);
  // The call ended by a reply of `bytes` over its limit: ResourceExhausted naming the task, the
  // request and its method.
  bool EndOversized(uint64_t id, uint64_t bytes, const void* peer) DFLOW_EXCLUDES(mu_);
  // Ends call `id` with `result` when it still waits (through `peer`, when given): whether it
  // did. A result over the call's reply limit ends it as EndOversized does.
  bool End(uint64_t id, Result<std::string> result, const void* peer = nullptr) DFLOW_EXCLUDES(mu_);
  // Ends the calls past their deadline with DeadlineExceeded naming the task, the request, its
  // method and the timeout. Costs a load when none is due.
  void Expire() DFLOW_EXCLUDES(mu_);
  // Ends with `why` the calls through `peer`.
  void FailPeer(const void* peer, const Status& why) DFLOW_EXCLUDES(mu_);
  // Ends with `why` the calls to `task`; every call when `task` is empty.
  void FailTask(const std::string& task, const Status& why) DFLOW_EXCLUDES(mu_);

 private:
  struct Call {
    std::string task;
    const void* peer = nullptr;
    uint16_t method = 0;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout{0};
    Transport::Reply done;
  };
  template <typename Pred>
  void FailWhere(Pred pred, const Status& why) DFLOW_EXCLUDES(mu_);
  void UpdateNextDeadline() DFLOW_REQUIRES(mu_);

  Status Oversized(uint64_t id, const Call& c, uint64_t bytes) const DFLOW_REQUIRES(mu_);
  uint64_t LimitOf(uint16_t method) const DFLOW_REQUIRES(mu_);

  mutable Mutex mu_;
  uint64_t next_id_ DFLOW_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint16_t, uint64_t> reply_limits_ DFLOW_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Call> calls_ DFLOW_GUARDED_BY(mu_);
  // The earliest deadline of calls_ (max when none), read without mu_.
  std::atomic<int64_t> next_deadline_ns_{INT64_MAX};
};

}  // namespace dflow::transport
