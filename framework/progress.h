// Progress engines: what a thread that waits for another process's messages may drive itself.
//
// A transport moves messages on a progress thread of its own. When a step's thread has nothing
// to run but a Recv, handing each arriving tensor from that thread to the step's costs a wake-up
// (10 to 50 us on a small virtual machine), twice per hop of a ring all-reduce. Open MPI and UCX
// avoid it by letting the waiting thread poll the network itself (opal_progress,
// ucp_worker_progress). A transport registers a ProgressEngine here; a waiting thread opens a
// PollingScope, which tells every engine that someone polls (its own thread may then sleep) and
// polls them all.
#pragma once

#include <memory>
#include <vector>

namespace dflow {

class ProgressEngine {
 public:
  virtual ~ProgressEngine() = default;
  // A thread starts (Begin) or stops (End) calling Poll; calls nest across threads.
  virtual void BeginPolling() = 0;
  virtual void EndPolling() = 0;
  // Moves messages along from the calling thread without blocking (an engine busy elsewhere
  // returns at once); true when it did any work. Callbacks of the engine's may run inside.
  virtual bool Poll() = 0;
};

// Registers `engine` for every PollingScope opened from now on.
void AddProgressEngine(ProgressEngine* engine);
// Unregisters it; returns once no thread polls it any more.
void RemoveProgressEngine(ProgressEngine* engine);

// Polls the engines registered when it was opened, between its construction and destruction.
// Cheap when none is registered (one atomic load).
class PollingScope {
 public:
  PollingScope();
  ~PollingScope();
  PollingScope(const PollingScope&) = delete;
  PollingScope& operator=(const PollingScope&) = delete;

  // Polls each engine once; true when any did work.
  bool Poll();
  bool empty() const { return engines_.empty(); }

  struct Entry;  // a registration (progress.cc)

 private:
  std::vector<std::shared_ptr<Entry>> engines_;
};

}  // namespace dflow
