// Requests and responses between tasks, and the service thread that runs the call handler
// (ucx_impl.h).
#include <fmt/format.h>

#include <algorithm>

#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

using namespace internal;

void UcxEngine::SetCallHandler(Transport::CallHandler handler,
                               std::vector<uint16_t> quick_methods) {
  MutexLock running(handler_run_mu_);  // waits for a handler call in progress
  MutexLock running_quick(quick_run_mu_);
  MutexLock lock(service_mu_);
  handler_ = std::move(handler);
  quick_methods_ = std::move(quick_methods);
}

void UcxEngine::ServiceLoop() {
  pthread_setname_np(pthread_self(), "dflow service");
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(service_mu_);
      service_cv_.Wait(service_mu_, [&]() DFLOW_REQUIRES(service_mu_) {
        return service_stop_ || !service_queue_.empty();
      });
      if (service_stop_) return;
      job = std::move(service_queue_.front());
      service_queue_.pop_front();
    }
    job();
  }
}

void UcxEngine::CallAsync(const std::string& task, uint16_t method, std::string payload,
                          std::chrono::milliseconds timeout, Transport::Reply done) {
  if (payload.size() > kMaxCallBytes) {
    done(InvalidArgument("a request to task {} of {} bytes is over the limit of {}", task,
                         payload.size(), kMaxCallBytes));
    return;
  }
  uint64_t id;
  Peer* peer;
  {
    MutexLock lock(mu_);
    peer = ReadyPeer(task);
    if (peer == nullptr) {
      lock.Unlock();
      done(Unavailable("no connection to task {} for a request", task));
      return;
    }
    id = next_call_id_++;
  }
  auto header = Encode(CallRequest{id, method});
  if (!header.ok()) {
    done(header.status());
    return;
  }
  {
    MutexLock lock(mu_);
    PendingCall& call = calls_[id];
    call.peer = peer;
    call.task = task;
    call.method = method;
    call.timeout = timeout;
    call.deadline = std::chrono::steady_clock::now() + timeout;
    call.done = std::move(done);
    UpdateNextDeadline();
  }
  auto* op = new SendOp;
  op->impl = this;
  op->peer = peer;
  op->type = MessageType::kCallRequest;
  op->header = std::move(header).value();
  op->bytes = std::move(payload);
  op->call_id = id;
  op->what = fmt::format("{} (method {}) to task {}", id, method, task);
  Post([this, op] { StartSend(op); });
  // A deadline sooner than the progress thread's longest sleep must wake it.
  if (timeout < std::chrono::milliseconds(kMaxSleepMs)) Post([] {});
}

void UcxEngine::UpdateNextDeadline() {
  int64_t next = INT64_MAX;
  for (const auto& [id, call] : calls_) {
    next = std::min<int64_t>(next, call.deadline.time_since_epoch().count());
  }
  next_deadline_ns_.store(next, std::memory_order_relaxed);
}

Transport::Reply UcxEngine::TakeCall(uint64_t id, Peer* from) {
  auto it = calls_.find(id);
  if (it == calls_.end() || (from != nullptr && it->second.peer != from)) return nullptr;
  Transport::Reply done = std::move(it->second.done);
  calls_.erase(it);
  UpdateNextDeadline();
  return done;
}

void UcxEngine::ExpireCalls() {
  const auto now = std::chrono::steady_clock::now();
  if (now.time_since_epoch().count() < next_deadline_ns_.load(std::memory_order_relaxed)) return;
  std::vector<std::pair<Transport::Reply, Status>> expired;
  {
    MutexLock lock(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      const PendingCall& c = it->second;
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

void UcxEngine::FailCall(uint64_t call_id, const Status& why) {
  Transport::Reply done;
  {
    MutexLock lock(mu_);
    done = TakeCall(call_id, nullptr);
  }
  if (done) done(why);
}

void UcxEngine::FailCalls(Peer* peer, const Status& why) {
  std::vector<Transport::Reply> failed;
  {
    MutexLock lock(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.peer == peer) {
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

ucs_status_t UcxEngine::TakePayload(void* data, size_t length, const ucp_am_recv_param_t* param,
                                    std::function<void(Status, std::string)> then) {
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    then(Status::OK(), std::string(static_cast<const char*>(data), length));
    return UCS_OK;
  }
  auto* blob = new Blob;
  blob->impl = this;
  blob->bytes.resize(length);
  blob->then = std::move(then);
  // Pulled outside UCX's callback.
  deferred_.push_back([this, blob, data, length] {
    ucs_status_t s = Pull(data, blob->bytes.data(), length, &BlobDone, blob);
    if (s == UCS_INPROGRESS) return;
    std::unique_ptr<Blob> owned(blob);
    if (s == UCS_OK) {
      blob->then(Status::OK(), std::move(blob->bytes));
    } else {
      blob->then(UcxError("receiving a message", s), std::string());
    }
  });
  return UCS_INPROGRESS;
}

void UcxEngine::BlobDone(void* request, ucs_status_t status, size_t length, void* user_data) {
  std::unique_ptr<Blob> blob(static_cast<Blob*>(user_data));
  if (status == UCS_OK) {
    blob->then(Status::OK(), std::move(blob->bytes));
  } else {
    blob->then(UcxError("receiving a message", status), std::string());
  }
  ucp_request_free(request);
}

ucs_status_t UcxEngine::OnRequest(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  const std::string from = self->ReadyTask(peer);
  if (from.empty()) return self->Drop("a request from an endpoint that did not shake hands");
  auto request = DecodeCallRequest({static_cast<const char*>(header), header_length});
  if (!request.ok()) {
    return self->Drop(
        fmt::format("a malformed request from task {}: {}", from, request.status().message()));
  }
  if (length > kMaxCallBytes) {
    self->Respond(
        peer, request->call_id,
        InvalidArgument("a request of {} bytes is over the limit of {}", length, kMaxCallBytes));
    return UCS_OK;  // drops the data
  }
  CallRequest r = *request;
  return self->TakePayload(data, length, param, [self, peer, from, r](Status s, std::string bytes) {
    if (!s.ok()) {
      self->Respond(peer, r.call_id, s);
      return;
    }
    self->Serve(from, r, std::move(bytes), peer);
  });
}

void UcxEngine::Serve(const std::string& from, CallRequest request, std::string payload,
                      Peer* peer) {
  {
    MutexLock lock(service_mu_);
    if (std::find(quick_methods_.begin(), quick_methods_.end(), request.method) ==
        quick_methods_.end()) {
      service_queue_.push_back([this, from, request, peer, payload = std::move(payload)]() mutable {
        MutexLock running(handler_run_mu_);
        CallHandler(from, request, std::move(payload), peer);
      });
      lock.Unlock();
      service_cv_.NotifyOne();
      return;
    }
  }
  MutexLock running(quick_run_mu_);
  CallHandler(from, request, std::move(payload), peer);
}

void UcxEngine::CallHandler(const std::string& from, const CallRequest& request,
                            std::string payload, Peer* peer) {
  Transport::CallHandler handler;
  {
    MutexLock lock(service_mu_);
    handler = handler_;
  }
  if (!handler) {
    Respond(peer, request.call_id,
            Unimplemented("task {} serves no requests (method {} asked)", task(), request.method));
    return;
  }
  uint64_t id = request.call_id;
  auto replied = std::make_shared<std::atomic<bool>>(false);
  handler(Transport::CallInfo{from, request.method}, std::move(payload),
          [this, peer, id, replied](Result<std::string> result) {
            if (replied->exchange(true)) return;  // exactly once
            Respond(peer, id, std::move(result));
          });
}

void UcxEngine::Respond(Peer* peer, uint64_t call_id, Result<std::string> result) {
  if (result.ok() && result->size() > kMaxCallBytes) {
    result =
        Internal("the reply of {} bytes is over the limit of {}", result->size(), kMaxCallBytes);
  }
  CallResponse response;
  response.call_id = call_id;
  if (!result.ok()) response.status = result.status();
  auto header = Encode(response);
  if (!header.ok()) return;
  auto* op = new SendOp;
  op->impl = this;
  op->peer = peer;
  op->type = MessageType::kCallResponse;
  op->header = std::move(header).value();
  if (result.ok()) op->bytes = std::move(result).value();
  op->what = fmt::format("the reply to request {}", call_id);
  Post([this, op] { StartSend(op); });
}

ucs_status_t UcxEngine::OnResponse(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  Peer* peer = self->PeerOf(param);
  auto response = DecodeCallResponse({static_cast<const char*>(header), header_length});
  if (peer == nullptr || !response.ok()) {
    return self->Drop("a malformed response or one from an unknown endpoint");
  }
  {
    // Only the task asked may answer.
    MutexLock lock(self->mu_);
    auto it = self->calls_.find(response->call_id);
    if (it == self->calls_.end() || it->second.peer != peer) {
      lock.Unlock();
      return self->Drop(
          fmt::format("a response to request {} nobody waits for", response->call_id));
    }
  }
  CallResponse r = std::move(response).value();
  return self->TakePayload(data, length, param, [self, r, peer](Status s, std::string bytes) {
    Transport::Reply done;
    {
      MutexLock lock(self->mu_);
      done = self->TakeCall(r.call_id, peer);
    }
    if (!done) return;  // ended by its deadline meanwhile
    if (!s.ok()) {
      done(s);
    } else if (!r.status.ok()) {
      done(r.status);
    } else {
      done(std::move(bytes));
    }
  });
}

}  // namespace dflow::transport
