// Requests and responses between tasks (ucx_impl.h): the calls waited on are a PendingCalls,
// and a CallServer runs the handler (transport/).
#include <fmt/format.h>

#include <algorithm>

#include "transport/ucx/ucx_impl.h"

namespace dflow::transport {

using namespace internal;

void UcxEngine::CallAsync(const std::string& task, uint16_t method, std::string payload,
                          std::chrono::milliseconds timeout, Transport::Reply done) {
  if (payload.size() > kMaxCallBytes) {
    done(InvalidArgument("a request to task {} of {} bytes is over the limit of {}", task,
                         payload.size(), kMaxCallBytes));
    return;
  }
  Peer* peer;
  uint64_t id = 0;
  {
    // Added under mu_: a shutdown that forgets the peers after this fails the call too.
    MutexLock lock(mu_);
    peer = ReadyPeer(task);
    if (peer != nullptr) {
      id = calls_.Add(task, peer, method, timeout, std::move(done));
      peer->sends++;  // the request's SendOp, made below; FinishSend takes it back
    }
  }
  if (peer == nullptr) {
    done(Unavailable("no connection to task {} for a request", task));
    return;
  }
  auto header = Encode(CallRequest{id, method});
  if (!header.ok()) {
    peer->sends--;
    calls_.End(id, header.status());
    return;
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
  peer->holds++;  // until Respond: a reply may come long after the peer has gone
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
    self->server_.Serve(Transport::CallInfo{from, r.method}, std::move(bytes),
                        [self, peer, id = r.call_id](Result<std::string> result) {
                          self->Respond(peer, id, std::move(result));
                        });
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
  if (!header.ok()) {
    peer->holds--;
    return;
  }
  auto* op = new SendOp;
  op->impl = this;
  op->peer = peer;
  peer->sends++;  // FinishSend takes it back
  peer->holds--;  // the request's hold, now the reply's send
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
  // Only the task asked may answer, and with no more than a reply to its method may have.
  const std::optional<uint64_t> room = self->calls_.ReplyRoom(response->call_id, peer);
  if (!room) {
    return self->Drop(fmt::format("a response to request {} nobody waits for", response->call_id));
  }
  if (length > *room) {
    self->calls_.EndOversized(response->call_id, length, peer);
    return UCS_OK;  // its bytes are dropped, never taken in
  }
  CallResponse r = std::move(response).value();
  return self->TakePayload(data, length, param, [self, r, peer](Status s, std::string bytes) {
    // Ended meanwhile by its deadline, or not.
    if (!s.ok()) {
      self->calls_.End(r.call_id, s, peer);
    } else if (!r.status.ok()) {
      self->calls_.End(r.call_id, r.status, peer);
    } else {
      self->calls_.End(r.call_id, std::move(bytes), peer);
    }
  });
}

}  // namespace dflow::transport
