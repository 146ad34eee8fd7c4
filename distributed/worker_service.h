// WorkerService: what a dflow-worker process does for its master, as the call handler of its
// transport (transport/transport.h):
//
//   GetDevices  names the caller's job and makes the job's devices on first call (named under
//               the worker's task, with calibrated figures) and lists them with their figures;
//   Compile     takes a signature's partitions for this worker's devices, in the graph file
//               form, and compiles them (cached by the signature's id);
//   RunStep     runs a compiled signature for one step: feeds in, fetches out, tensors to and
//               from other tasks through the transport's rendezvous; a failure aborts the step
//               on every task;
//   Release     forgets a compiled signature;
//   ReadVariables / WriteVariables  the values of variables, by device and name (checkpoints);
//   ConnectPeers  connects to the other workers (the master lists them with their addresses;
//               a worker connects to those after it in the list, so each pair has one
//               connection).
//
// Many jobs on one worker: every request belongs to its caller's job, which GetDevices names
// (GetDevicesRequest; a master that names none has a job of its own). Each job has its own
// devices (own incarnations), variables, compiled signatures and checkpoint slices, so one
// master's graphs, variables and steps are its own, and masters share them only by giving the
// same job (a restarted master resuming its work). A job's state is dropped when its master
// ends it (ReleaseRequest::end_job), or when none of its masters has been connected for
// release_after; one job's end never touches another's.
//
// Variables live on the worker's devices and keep their values between steps and signatures.
// Steps run on threads of their own, so requests keep being answered while steps run.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distributed/messages.h"
#include "framework/device.h"
#include "framework/step_threads.h"
#include "graph/mutex.h"
#include "runtime/partitioned_plan.h"
#include "transport/transport.h"

namespace dflow::distributed {

struct WorkerOptions {
  // This worker's devices, "cpu:0", "cpu:1", ...; they take the task name the master assigns.
  std::vector<std::string> devices = {"cpu:0"};
  // Per device, bytes (0: the device's default, the machine's memory for a CPU).
  double memory_limit_bytes = 0;
  // Threads for all of this worker's devices together (0: every core), split evenly.
  int threads = 0;
  // Measure this machine's CPU (runtime/calibration.h) for the figures the worker registers,
  // as a local session does; false: the cost model's fixed defaults (reproducible placements).
  bool calibrate = true;
  // Steps that may run at once. Each runs on a thread of its own from the moment it arrives,
  // never queued behind running ones (a queued step's partition could be what a running step
  // of another task waits for: with asynchronous parameter servers, each server running a
  // different half of the steps deadlocked them all); a step past the limit is refused with
  // ResourceExhausted. Threads started stay for later steps.
  int max_concurrent_steps = 64;
  // When none of a job's masters has been connected for this long, the worker drops the job's
  // compiled signatures and its devices with their variables. 0: never (only a master ending
  // its job drops it).
  std::chrono::milliseconds release_after{std::chrono::minutes(5)};
  // Jobs held at once; a new job past it is refused with ResourceExhausted (each holds devices
  // with their threads and memory).
  int max_jobs = 16;
};

class WorkerService {
 public:
  // Serves `transport`'s requests from now on; `transport` must outlive the service.
  static Result<std::unique_ptr<WorkerService>> Create(transport::Transport* transport,
                                                       WorkerOptions options);
  // Stops serving (later requests are answered Unimplemented) and waits for running steps.
  ~WorkerService();

  // Compiled signatures, of every job.
  int num_signatures() const;
  int num_jobs() const;
  // Device sets of ended jobs kept for the next new job (SpareDevices).
  int num_spare_device_sets() const;
  // Jobs dropped because their masters had gone (release_after).
  int releases() const;

 private:
  WorkerService(transport::Transport* transport, WorkerOptions options);
  void Handle(const transport::Transport::CallInfo& call, std::string payload,
              transport::Transport::Reply reply);

  // A variable read or written in slices (a checkpoint in bounded chunks): its whole host
  // value, and the element its next slice starts at.
  struct PartialVariable {
    Tensor value;
    int64_t next = 0;
  };

  struct Signature {
    int num_feeds = 0;  // of the step
    std::shared_ptr<PartitionedPlan> plan;
    std::vector<std::string> devices;  // partition -> its device's canonical name
  };

  // One job's state; its fields are guarded by the service's mu_. A running step holds its job,
  // so a job dropped meanwhile keeps its devices until the step ends.
  struct Job {
    std::string name;  // for messages: "job 'NAME'", or "the job of TASK"
    std::vector<std::unique_ptr<Device>> devices;
    std::string devices_reply;  // GetDevicesReply, encoded
    std::map<std::string, std::shared_ptr<Signature>> signatures;
    // By device and variable name (a slice's key): a sliced read's copy, a sliced write's
    // assembly.
    std::map<std::string, PartialVariable> partial_reads;
    std::map<std::string, PartialVariable> partial_writes;
    std::set<std::string> callers;  // the tasks whose requests are this job's
    int running_steps = 0;
    std::chrono::steady_clock::time_point last_seen;  // with a caller connected
  };

  Result<std::string> GetDevices(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  // The key in jobs_ of `from`'s requests: the job it named, else its own.
  std::string JobKey(const std::string& from) const DFLOW_REQUIRES(mu_);
  // The job of `from`'s requests, made on first use; ResourceExhausted past max_jobs.
  Result<std::shared_ptr<Job>> JobOf(const std::string& from) DFLOW_REQUIRES(mu_);
  // Forgets the job and hands its state to the watcher to free.
  void DropJob(const std::string& key) DFLOW_REQUIRES(mu_);
  Status EnsureDevices(Job& job) DFLOW_REQUIRES(mu_);
  Result<std::string> Compile(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  Result<std::string> RunStep(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  Result<std::string> Release(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  Result<std::string> ConnectPeers(std::string_view payload);
  Result<std::string> MeasureLinks(std::string_view payload);
  Result<std::string> ReadVariables(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  Result<std::string> WriteVariables(const std::string& from, std::string_view payload)
      DFLOW_EXCLUDES(mu_);
  // The devices of a Read/WriteVariables request's variables, in order.
  Result<std::vector<Device*>> DevicesOf(Job& job, const std::vector<VariableRef>& variables)
      DFLOW_REQUIRES(mu_);
  // A thread of its own: frees dropped jobs (DropJob hands them over) and drops the jobs whose
  // masters are gone for release_after.
  void Watch() DFLOW_EXCLUDES(mu_);

  transport::Transport* transport_;
  WorkerOptions options_;
  mutable Mutex mu_;
  // By key: "job NAME" for a named job, "of TASK" for a caller's own.
  std::map<std::string, std::shared_ptr<Job>> jobs_ DFLOW_GUARDED_BY(mu_);
  std::map<std::string, std::string> job_of_caller_ DFLOW_GUARDED_BY(mu_);  // task -> key
  std::vector<std::shared_ptr<Job>> retired_ DFLOW_GUARDED_BY(mu_);         // dropped, to be freed
  // Devices of ended jobs, their variables cleared, for the next new job: a master coming
  // after another finds warm threads and allocator caches, not a cold start (its first steps'
  // memory faulted in again). Freed after release_after unused.
  struct SpareDevices {
    std::vector<std::unique_ptr<Device>> devices;
    std::string reply;  // GetDevicesReply, encoded
    std::chrono::steady_clock::time_point since;
  };
  static constexpr size_t kSpareDeviceSets = 2;
  std::vector<SpareDevices> spare_devices_ DFLOW_GUARDED_BY(mu_);
  int releases_ DFLOW_GUARDED_BY(mu_) = 0;
  bool stopping_ DFLOW_GUARDED_BY(mu_) = false;
  CondVar stop_cv_;
  std::thread watcher_;
  // RunSteps handed to steps_ and not yet answered (of every job: max_concurrent_steps).
  std::atomic<int> started_steps_{0};
  std::unique_ptr<StepThreads> steps_;  // last: destroyed first, while the rest still exists
};

}  // namespace dflow::distributed
