#include "transport/transport.h"

namespace dflow::transport {

Result<std::string> Transport::Call(const std::string& task, uint16_t method, std::string payload,
                                    std::chrono::milliseconds timeout) {
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool done DFLOW_GUARDED_BY(mu) = false;
    Result<std::string> result DFLOW_GUARDED_BY(mu) = std::string();
  };
  auto w = std::make_shared<Waiter>();
  CallAsync(task, method, std::move(payload), timeout, [w](Result<std::string> r) {
    MutexLock lock(w->mu);
    w->result = std::move(r);
    w->done = true;
    w->cv.NotifyAll();
  });
  MutexLock lock(w->mu);
  w->cv.Wait(w->mu, [&]() DFLOW_REQUIRES(w->mu) { return w->done; });
  return std::move(w->result);
}

Status TransportRegistry::Register(const std::string& name, CreateFn create,
                                   std::string local_address) {
  if (name.empty()) return InvalidArgument("a transport needs a name");
  MutexLock lock(mu_);
  if (!kinds_.emplace(name, Kind{std::move(create), std::move(local_address)}).second) {
    return InvalidArgument("transport '{}' is already registered", name);
  }
  return Status::OK();
}

Status TransportRegistry::Unregister(const std::string& name) {
  MutexLock lock(mu_);
  if (kinds_.erase(name) == 0) return NotFound("transport '{}' is not registered", name);
  return Status::OK();
}

Result<std::unique_ptr<Transport>> TransportRegistry::Create(const std::string& name,
                                                             TransportOptions options) const {
  CreateFn create;
  {
    MutexLock lock(mu_);
    auto it = kinds_.find(name);
    if (it == kinds_.end()) {
      std::string known;
      for (const auto& [n, k] : kinds_) known += (known.empty() ? "" : ", ") + n;
      return NotFound("no transport '{}' in this build (transports: {})", name,
                      known.empty() ? "none" : known);
    }
    create = it->second.create;
  }
  return create(std::move(options));
}

std::vector<std::string> TransportRegistry::names() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, k] : kinds_) out.push_back(n);
  return out;
}

Result<std::string> TransportRegistry::LocalAddress(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = kinds_.find(name);
  if (it == kinds_.end()) return NotFound("transport '{}' is not registered", name);
  return it->second.local_address;
}

}  // namespace dflow::transport
