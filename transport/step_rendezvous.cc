#include "transport/step_rendezvous.h"

#include <unordered_set>
#include <vector>

#include "graph/mutex.h"

namespace dflow::transport {
namespace {

class StepRendezvous final : public Rendezvous {
 public:
  StepRendezvous(StepHost* host, int64_t step) : host_(host) {
    steps_.insert(step);
    host_->AttachStep(step);
  }
  ~StepRendezvous() override {
    std::vector<int64_t> steps;
    {
      MutexLock lock(mu_);
      steps.assign(steps_.begin(), steps_.end());
    }
    for (int64_t step : steps) host_->ReleaseStep(step);
  }
  Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) override {
    RETURN_IF_ERROR(Use(key.step_id));
    return host_->Send(key, args, tensor);
  }
  void RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) override {
    Status aborted = Use(key.step_id);
    if (!aborted.ok()) {
      done(aborted, Tensor());
      return;
    }
    host_->RecvAsync(key, args, std::move(done));
  }
  bool TakesDeviceMemory(const RendezvousKey& key) const override {
    return host_->TakesDeviceMemory(key);
  }
  void CancelRecv(const RendezvousKey& key, const Status& why) override {
    host_->CancelRecv(key, why);
  }
  void Abort(const Status& status) override {
    std::vector<int64_t> steps;
    Status why;
    {
      MutexLock lock(mu_);
      if (!aborted_.ok()) return;
      aborted_ = status.ok() ? Cancelled("rendezvous aborted") : status;
      why = aborted_;
      steps.assign(steps_.begin(), steps_.end());
    }
    for (int64_t step : steps) host_->AbortStep(step, why, true);
  }

 private:
  // Notes the step; the abort status once aborted.
  Status Use(int64_t step) DFLOW_EXCLUDES(mu_) {
    bool fresh;
    {
      MutexLock lock(mu_);
      if (!aborted_.ok()) return aborted_;
      fresh = steps_.insert(step).second;
    }
    if (fresh) host_->AttachStep(step);
    return Status::OK();
  }

  StepHost* host_;
  Mutex mu_;
  Status aborted_ DFLOW_GUARDED_BY(mu_);
  std::unordered_set<int64_t> steps_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Rendezvous> MakeStepRendezvous(StepHost* host, int64_t step) {
  return std::make_unique<StepRendezvous>(host, step);
}

}  // namespace dflow::transport
