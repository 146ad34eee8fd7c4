// Test helper: a step's rendezvous through two joined transports of this process, so that every
// tensor the rendezvous conformance suite (framework/rendezvous_conformance.h) sends crosses from
// one transport to the other.
#pragma once

#include <memory>
#include <utility>

#include "framework/rendezvous.h"

namespace dflow::testing {

// Sends go in through the sender's rendezvous, receives through the receiver's.
class PairRendezvous final : public Rendezvous {
 public:
  PairRendezvous(std::unique_ptr<Rendezvous> send, std::unique_ptr<Rendezvous> recv)
      : send_(std::move(send)), recv_(std::move(recv)) {}
  Status Send(const RendezvousKey& key, const SendArgs& args, const Tensor& tensor) override {
    return send_->Send(key, args, tensor);
  }
  void RecvAsync(const RendezvousKey& key, const RecvArgs& args, DoneCallback done) override {
    recv_->RecvAsync(key, args, std::move(done));
  }
  void CancelRecv(const RendezvousKey& key, const Status& why) override {
    recv_->CancelRecv(key, why);
  }
  void Abort(const Status& status) override {
    recv_->Abort(status);
    send_->Abort(status);
  }

 private:
  std::unique_ptr<Rendezvous> send_, recv_;
};

// Each step's rendezvous a PairRendezvous over `Pair`, a type with `sender` and `receiver`
// (pointers to joined transports) built from the factory's arguments.
template <typename Pair>
class PairFactory final : public RendezvousFactory {
 public:
  template <typename... Args>
  explicit PairFactory(Args&&... args) : pair_(std::forward<Args>(args)...) {}
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step) override {
    ASSIGN_OR_RETURN(auto s, pair_.sender->Create(step));
    ASSIGN_OR_RETURN(auto r, pair_.receiver->Create(step));
    return std::unique_ptr<Rendezvous>(
        std::make_unique<PairRendezvous>(std::move(s), std::move(r)));
  }

 private:
  Pair pair_;
};

}  // namespace dflow::testing
