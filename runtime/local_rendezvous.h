// LocalRendezvous: the in-process Rendezvous. A Send stores the tensor (a reference: CPU buffers
// change hands without a copy) or hands it to a Recv already waiting; Abort fails every waiting
// and later Recv with its status.
#pragma once

#include <mutex>
#include <unordered_map>

#include "ops/rendezvous.h"

namespace dflow {

class LocalRendezvous final : public Rendezvous {
 public:
  ~LocalRendezvous() override;
  Status Send(const std::string& key, const Tensor& tensor) override;
  void RecvAsync(const std::string& key, DoneCallback done) override;
  void Abort(const Status& status) override;

 private:
  struct Item {
    bool has_tensor = false;
    Tensor tensor;
    DoneCallback waiting;  // set when a Recv came first
  };
  std::mutex mu_;
  std::unordered_map<std::string, Item> items_;  // GUARDED_BY(mu_)
  Status aborted_;                               // GUARDED_BY(mu_)
};

}  // namespace dflow
