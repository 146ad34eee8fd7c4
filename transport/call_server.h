// CallServer: how a transport runs this process's call handler (Transport::SetCallHandler) for
// the requests that reach it, shared by every implementation.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "graph/mutex.h"
#include "transport/transport.h"

namespace dflow::transport {

// Handlers run one at a time on a service thread of the server's own, so that a slow handler
// never stalls the transport; a quick method's handler runs at once on the thread that serves
// it (the transport's own thread). A handler's reply is passed on exactly once. Thread-safe.
class CallServer {
 public:
  // `thread_name`: the service thread's; `task`: this process's task, which the answer to a
  // request that no handler serves names.
  CallServer(std::string thread_name, std::function<std::string()> task);
  // Stop().
  ~CallServer();
  CallServer(const CallServer&) = delete;
  CallServer& operator=(const CallServer&) = delete;

  // Serves requests with `handler` from now on; returns once no call of the previous handler
  // runs (so not from inside a handler).
  void SetHandler(Transport::CallHandler handler, std::vector<uint16_t> quick_methods)
      DFLOW_EXCLUDES(run_mu_, quick_run_mu_, mu_);
  bool IsQuick(uint16_t method) const DFLOW_EXCLUDES(mu_);
  // Runs the handler for `payload`, a request `call` (now, for a quick method; otherwise queued
  // for the service thread): `respond` gets its reply exactly once, or Unimplemented naming this
  // task and the method when no handler is set.
  void Serve(Transport::CallInfo call, std::string payload, Transport::Reply respond)
      DFLOW_EXCLUDES(run_mu_, quick_run_mu_, mu_);
  // Stops the service thread. Requests still queued are dropped unanswered: the transport is
  // ending, which ends their callers' calls. Idempotent.
  void Stop() DFLOW_EXCLUDES(mu_);

 private:
  void Loop() DFLOW_EXCLUDES(mu_);
  // Runs the handler set now for one request.
  void Run(const Transport::CallInfo& call, std::string payload, Transport::Reply respond)
      DFLOW_EXCLUDES(mu_);

  const std::string thread_name_;
  const std::function<std::string()> task_;
  // A handler runs under run_mu_ (service thread) or quick_run_mu_ (a quick method), so that
  // SetHandler can wait for it. Order: run_mu_, quick_run_mu_, mu_.
  Mutex run_mu_;
  Mutex quick_run_mu_;
  mutable Mutex mu_;
  CondVar cv_;
  Transport::CallHandler handler_ DFLOW_GUARDED_BY(mu_);
  std::vector<uint16_t> quick_methods_ DFLOW_GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ DFLOW_GUARDED_BY(mu_);
  bool stop_ DFLOW_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dflow::transport
