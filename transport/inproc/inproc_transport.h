// InprocTransport: the Transport (transport/transport.h) between dflow "processes" that are
// objects of one process: a master and its workers in a test, or a cluster run in one process
// to debug it. Transports find each other through a process-wide table of listeners, by the
// address they listen on (any name, "inproc:cluster-a"; one ending in ":0" is made unique).
//
// It keeps the contract of a transport between processes, so that what runs over it runs over
// UCX too: requests run on the asked transport's service thread and their replies on the
// caller's event thread; a tensor is copied out of the Send into memory of its own (a receiver
// never shares the sender's buffer) and reaches the other transport on that transport's event
// thread; tensors in device memory are refused. A transport that is destroyed is a lost peer:
// every call to it and every step open in its peers fail with Unavailable naming its task.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace dflow::transport {

class InprocTransport final : public Transport {
 public:
  // InvalidArgument for a bad task name or a token over 1 KiB; AlreadyExists for an address
  // another transport of this process listens on.
  static Result<std::unique_ptr<InprocTransport>> Create(TransportOptions options);
  // Fails its pending calls and open steps (Cancelled), and its peers' calls to it and steps
  // (Unavailable naming it); stops its threads.
  ~InprocTransport() override;

  std::string task() const override;
  uint64_t incarnation() const override;
  std::string listen_address() const override;
  Result<std::string> Connect(const std::string& address, const std::string& assign = "") override;
  std::vector<std::string> peers() const override;
  TransportStats stats() const override;
  void SetCallHandler(CallHandler handler, std::vector<uint16_t> quick_methods = {}) override;
  void CallAsync(const std::string& task, uint16_t method, std::string payload,
                 std::chrono::milliseconds timeout, Reply done) override;
  void SetReplyLimit(uint16_t method, uint64_t bytes) override;
  Result<std::unique_ptr<Rendezvous>> Create(int64_t step_id) override;

  class Impl;

 private:
  explicit InprocTransport(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Registers "inproc" with `registry`: transport/CMakeLists.txt's one line for this transport.
Status RegisterInprocTransport(TransportRegistry& registry);

}  // namespace dflow::transport
