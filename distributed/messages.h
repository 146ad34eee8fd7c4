// The requests a master sends its workers (transport::Transport::Call) and the workers' replies:
// one C++ struct per message, with one encoder and one decoder each. On the wire each is a
// FlatBuffers table of serialization/schema/control.fbs (docs/file_formats.md), so the schema,
// not a list of field names written twice, holds the two sides together.
//
// Payloads come from another process: decoding runs the FlatBuffers verifier, then checks every
// field (present, in range, tensors of the size their dtype and shape call for) and answers
// InvalidArgument naming the message and the field ("Compile request: ...").
//
//   Method          request                 reply
//   kGetDevices     GetDevicesRequest       GetDevicesReply
//   kCompile        CompileRequest          (empty)
//   kRunStep        RunStepRequest          RunStepReply
//   kRelease        ReleaseRequest          (empty)
//   kConnectPeers   ConnectPeersRequest     (empty)
//   kReadVariables  VariablesRequest        VariableValues
//   kWriteVariables VariableValues          (empty)
//   kMeasureLinks   MeasureLinksRequest     MeasureLinksReply
//   kEcho           any bytes               (empty)
//   kRegister       RegisterRequest         RegisterReply   (worker -> master's rendezvous)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "partition/partition_share.h"
#include "runtime/step_trace.h"

namespace dflow::distributed {

enum class Method : uint16_t {
  kGetDevices = 1,      // -> the worker's devices with their figures (made on first call)
  kCompile = 2,         // a signature's partitions for this worker's devices
  kRunStep = 3,         // runs a compiled signature's partitions for one step
  kRelease = 4,         // forgets a compiled signature
  kConnectPeers = 5,    // connects to the other tasks a step may send tensors to
  kReadVariables = 6,   // named variables of named devices -> their values (checkpoints)
  kWriteVariables = 7,  // sets named variables of named devices (restoring a checkpoint)
  kMeasureLinks = 8,    // measures the links to named tasks -> latency and bandwidth of each
  kEcho = 9,            // answers at once with nothing (what kMeasureLinks times)
  kRegister = 10,       // a worker joins its master's rendezvous (distributed/rendezvous.h)
};
inline constexpr uint16_t kMaxMethod = 10;

// One device of a worker with the figures the placer plans with.
struct DeviceInfo {
  std::string name;  // canonical: "/job:worker/task:0/device:CPU:0"
  uint64_t incarnation = 0;
  double memory_bytes = 0;
  double peak_flops = 0;
  double memory_bandwidth = 0;
  double launch_overhead_s = 0;
};

// The first request of a master to a worker: the job its requests from now on belong to. A
// worker keeps each job's devices, variables and compiled graphs apart from the others'; masters
// that give the same job share them (a master resuming another's work), and a master that gives
// none has a job of its own.
struct GetDevicesRequest {
  std::string job;  // empty: the calling task's own job
};
// A job name's most bytes; it is printable ASCII.
inline constexpr size_t kMaxJobNameBytes = 256;
// InvalidArgument naming `job` when it is longer than kMaxJobNameBytes or holds a byte that is
// not printable ASCII (a space included).
Status CheckJobName(std::string_view job);

struct GetDevicesReply {
  std::vector<DeviceInfo> devices;  // at least one
  // The link between two devices of the worker (calibrated, or the defaults).
  double same_process_latency_s = 0;
  double same_process_bandwidth = 0;
};

// A signature's partitions for one worker: each partition graph (graph file bytes) with the
// device that runs it and its share of the step (partition/partition_share.h).
struct CompileRequest {
  std::string signature;
  int num_feeds = 0;  // of the step: the shares' indices are below these
  int num_fetches = 0;
  bool plan_memory = true;
  bool fuse_epilogues = true;
  struct Partition {
    std::string device;
    std::string graph;
    PartitionShare share;
  };
  std::vector<Partition> partitions;  // at least one
};

// Tensors by their index among the step's feeds or fetches.
using IndexedTensors = std::vector<std::pair<int, Tensor>>;

struct RunStepRequest {
  std::string signature;
  int64_t step = 0;
  int64_t timeout_ms = 0;  // > 0: the step's deadline on the worker; 0: none
  bool trace = false;      // reply with the spans of the step's nodes
  IndexedTensors feeds;    // the step's feeds this worker's partitions take
};

struct RunStepReply {
  IndexedTensors fetches;            // the step's fetches this worker computed
  std::vector<DeviceTrace> devices;  // when traced: per device, the nodes that ran
};

struct ReleaseRequest {
  std::string signature;
  // Also ends the caller's job on the worker: its devices, variables and graphs are dropped
  // (once its running steps end).
  bool end_job = false;
};

struct ConnectPeersRequest {
  // Every worker of the cluster in order with its address; a worker connects to those after
  // it, so each pair has one connection.
  std::vector<std::pair<std::string, std::string>> peers;  // (task, address)
};

// Variables by device and name, whole or a slice of their elements (checkpoints of any size
// travel in bounded chunks): elements [offset, offset + count) of the variable in row-major
// order when count >= 0. A task's slices of one variable go in order, from offset 0. A slice's
// value is a flat tensor of its elements; a WriteVariables slice names the variable's `dims`.
struct VariableRef {
  std::string device;
  std::string name;
  int64_t offset = 0;
  int64_t count = -1;  // -1: the whole variable
  std::vector<int64_t> dims;
};

struct VariablesRequest {
  std::vector<VariableRef> variables;
};

// Variables' values: a ReadVariables reply (devices may be empty there) or a WriteVariables
// request.
struct VariableValues {
  std::vector<VariableRef> variables;
  std::vector<Tensor> values;  // in the order of `variables`
};

struct MeasureLinksRequest {
  std::vector<std::string> tasks;
};

struct MeasuredLinkInfo {
  std::string task;
  double latency_s = 0;
  double bandwidth = 0;  // bytes per second
};

struct MeasureLinksReply {
  std::vector<MeasuredLinkInfo> links;
};

// A worker joining its master: where it listens and what it has. Answered once every expected
// worker has joined, with the task name it is to take.
struct RegisterRequest {
  int rank = -1;                     // from its launcher or --rank; -1: numbered in arrival order
  int world_size = 0;                // from its launcher; 0: not known
  std::string address;               // where it listens, "HOST:PORT"
  std::vector<std::string> devices;  // "cpu:0", ...
  std::string launcher;              // "Slurm", "Open MPI", ... ; empty: none
};

struct RegisterReply {
  std::string task;  // "/job:worker/task:RANK"
  int world_size = 0;
};

// The most bytes a reply to `method` may have, which a master sets on its transport
// (Transport::SetReplyLimit): a worker's answer to a list of devices or an empty acknowledgement
// cannot make the master take in a gigabyte. Steps and variables: the transport's limit.
uint64_t MaxReplyBytes(Method method);
// Sets MaxReplyBytes of every method on `transport`.
template <typename T>
void SetReplyLimits(T& transport) {
  for (uint16_t m = 1; m <= kMaxMethod; ++m) {
    transport.SetReplyLimit(m, MaxReplyBytes(static_cast<Method>(m)));
  }
}

// Encoders take what the decoders accept (tensors valid and in host memory).
std::string Encode(const GetDevicesRequest& m);
std::string Encode(const GetDevicesReply& m);
std::string Encode(const CompileRequest& m);
std::string Encode(const RunStepRequest& m);
std::string Encode(const RunStepReply& m);
std::string Encode(const ReleaseRequest& m);
std::string Encode(const ConnectPeersRequest& m);
std::string Encode(const VariablesRequest& m);
std::string Encode(const VariableValues& m);
std::string Encode(const MeasureLinksRequest& m);
std::string Encode(const MeasureLinksReply& m);
std::string Encode(const RegisterRequest& m);
std::string Encode(const RegisterReply& m);

// `what` names the message in errors: "ReadVariables reply", "WriteVariables request".
// Empty bytes: a request with no job.
Result<GetDevicesRequest> DecodeGetDevicesRequest(std::string_view bytes);
Result<GetDevicesReply> DecodeGetDevicesReply(std::string_view bytes);
Result<CompileRequest> DecodeCompileRequest(std::string_view bytes);
Result<RunStepRequest> DecodeRunStepRequest(std::string_view bytes);
Result<RunStepReply> DecodeRunStepReply(std::string_view bytes);
Result<ReleaseRequest> DecodeReleaseRequest(std::string_view bytes);
Result<ConnectPeersRequest> DecodeConnectPeersRequest(std::string_view bytes);
Result<VariablesRequest> DecodeVariablesRequest(std::string_view bytes);
Result<VariableValues> DecodeVariableValues(std::string_view bytes, std::string_view what);
Result<MeasureLinksRequest> DecodeMeasureLinksRequest(std::string_view bytes);
Result<MeasureLinksReply> DecodeMeasureLinksReply(std::string_view bytes);
Result<RegisterRequest> DecodeRegisterRequest(std::string_view bytes);
Result<RegisterReply> DecodeRegisterReply(std::string_view bytes);

}  // namespace dflow::distributed
