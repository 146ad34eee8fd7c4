#include "transport/call_server.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

namespace dflow::transport {

CallServer::CallServer(std::string thread_name, std::function<std::string()> task)
    : thread_name_(std::move(thread_name)), task_(std::move(task)) {
  thread_ = std::thread([this] { Loop(); });
}

CallServer::~CallServer() { Stop(); }

void CallServer::SetHandler(Transport::CallHandler handler, std::vector<uint16_t> quick_methods) {
  // Taken in this order, they wait for the handlers running now.
  MutexLock running(run_mu_);
  MutexLock running_quick(quick_run_mu_);
  MutexLock lock(mu_);
  handler_ = std::move(handler);
  quick_methods_ = std::move(quick_methods);
}

bool CallServer::IsQuick(uint16_t method) const {
  MutexLock lock(mu_);
  return std::find(quick_methods_.begin(), quick_methods_.end(), method) != quick_methods_.end();
}

void CallServer::Serve(Transport::CallInfo call, std::string payload, Transport::Reply respond) {
  // Exactly once, whatever the handler does.
  auto once = [respond = std::move(respond),
               replied = std::make_shared<std::atomic<bool>>(false)](Result<std::string> r) {
    if (!replied->exchange(true)) respond(std::move(r));
  };
  if (IsQuick(call.method)) {
    MutexLock running(quick_run_mu_);
    Run(call, std::move(payload), std::move(once));
    return;
  }
  MutexLock lock(mu_);
  if (stop_) return;
  queue_.push_back([this, call = std::move(call), payload = std::move(payload),
                    once = std::move(once)]() mutable {
    MutexLock running(run_mu_);
    Run(call, std::move(payload), std::move(once));
  });
  cv_.NotifyOne();
}

void CallServer::Run(const Transport::CallInfo& call, std::string payload,
                     Transport::Reply respond) {
  Transport::CallHandler handler;
  {
    MutexLock lock(mu_);
    handler = handler_;
  }
  if (!handler) {
    respond(Unimplemented("task {} serves no requests (method {} asked)", task_(), call.method));
    return;
  }
  handler(call, std::move(payload), std::move(respond));
}

void CallServer::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void CallServer::Loop() {
  pthread_setname_np(pthread_self(), thread_name_.substr(0, 15).c_str());
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() DFLOW_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace dflow::transport
