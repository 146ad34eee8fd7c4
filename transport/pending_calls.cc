#include "transport/pending_calls.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace dflow::transport {

uint64_t PendingCalls::Add(const std::string& task, const void* peer, uint16_t method,
                           std::chrono::milliseconds timeout, Transport::Reply done) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  calls_[id] = Call{.task = task,
                    .peer = peer,
                    .method = method,
                    .deadline = std::chrono::steady_clock::now() + timeout,
                    .timeout = timeout,
                    .done = std::move(done)};
  UpdateNextDeadline();
  return id;
}

bool PendingCalls::Awaits(uint64_t id, const void* peer) const {
  MutexLock lock(mu_);
  auto it = calls_.find(id);
  return it != calls_.end() && it->second.peer == peer;
}

void PendingCalls::SetReplyLimit(uint16_t method, uint64_t bytes) {
  MutexLock lock(mu_);
  reply_limits_[method] = std::min(bytes, kMaxReplyBytes);
}

uint64_t PendingCalls::LimitOf(uint16_t method) const {
  auto it = reply_limits_.find(method);
  return it == reply_limits_.end() ? kMaxReplyBytes : it->second;
}

std::optional<uint64_t> PendingCalls::ReplyRoom(uint64_t id, const void* peer) const {
  MutexLock lock(mu_);
  auto it = calls_.find(id);
  if (it == calls_.end() || it->second.peer != peer) return std::nullopt;
  return LimitOf(it->second.method);
}

Status PendingCalls::Oversized(uint64_t id, const Call& c, uint64_t bytes) const {
  return ResourceExhausted(
      "task {} answered request {} (method {}) with {} bytes, over the {} a reply to it may "
      "have",
      c.task, id, c.method, bytes, LimitOf(c.method));
}

bool PendingCalls::EndOversized(uint64_t id, uint64_t bytes, const void* peer) {
  Status why;
  {
    MutexLock lock(mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || (peer != nullptr && it->second.peer != peer)) return false;
    why = Oversized(id, it->second, bytes);
  }
  return End(id, why, peer);
}

bool PendingCalls::End(uint64_t id, Result<std::string> result, const void* peer) {
  Transport::Reply done;
  {
    MutexLock lock(mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || (peer != nullptr && it->second.peer != peer)) return false;
    if (result.ok() && result->size() > LimitOf(it->second.method)) {
      result = Oversized(id, it->second, result->size());
    }
    done = std::move(it->second.done);
    calls_.erase(it);
    UpdateNextDeadline();
  }
  done(std::move(result));
  return true;
}

void PendingCalls::Expire() {
  const auto now = std::chrono::steady_clock::now();
  if (now.time_since_epoch().count() < next_deadline_ns_.load(std::memory_order_relaxed)) return;
  std::vector<std::pair<Transport::Reply, Status>> expired;
  {
    MutexLock lock(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      const Call& c = it->second;
      if (c.deadline > now) {
        ++it;
        continue;
      }
      expired.emplace_back(
          std::move(it->second.done),
          DeadlineExceeded("task {} did not answer request {} (method {}) within {} ms", c.task,
                           it->first, c.method, c.timeout.count()));
      it = calls_.erase(it);
    }
    UpdateNextDeadline();
  }
  for (auto& [done, why] : expired) done(why);
}

template <typename Pred>
void PendingCalls::FailWhere(Pred pred, const Status& why) {
  std::vector<Transport::Reply> failed;
  {
    MutexLock lock(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (pred(it->second)) {
        failed.push_back(std::move(it->second.done));
        it = calls_.erase(it);
      } else {
        ++it;
      }
    }
    UpdateNextDeadline();
  }
  for (auto& done : failed) done(why);
}

void PendingCalls::FailPeer(const void* peer, const Status& why) {
  FailWhere([peer](const Call& c) { return c.peer == peer; }, why);
}

void PendingCalls::FailTask(const std::string& task, const Status& why) {
  FailWhere([&task](const Call& c) { return task.empty() || c.task == task; }, why);
}

void PendingCalls::UpdateNextDeadline() {
  int64_t next = INT64_MAX;
  for (const auto& [id, call] : calls_) {
    next = std::min<int64_t>(next, call.deadline.time_since_epoch().count());
  }
  next_deadline_ns_.store(next, std::memory_order_relaxed);
}

}  // namespace dflow::transport
