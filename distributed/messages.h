// The requests a master sends its workers (transport::UcxTransport::Call), and their payloads.
// A payload is a frame: a JSON object of small fields and a list of binary blobs (graph files,
// tensors in the checkpoint format). Payloads come from another process, so decoding checks
// every field and bound and answers InvalidArgument naming the request and the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"

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
};

struct Frame {
  nlohmann::json meta = nlohmann::json::object();
  std::vector<std::string> blobs;
};

// u32 JSON length, the JSON, u32 blob count, then each blob as u64 length and bytes.
std::string EncodeFrame(const Frame& frame);
// `what` names the request in errors: "Compile" gives "Compile request: ..."; a name ending in
// "reply" ("GetDevices reply") is used as it is.
Result<Frame> DecodeFrame(std::string_view bytes, std::string_view what);

// Named tensors as one blob (serialization/checkpoint_file.h's form).
std::string EncodeTensors(const std::map<std::string, Tensor>& tensors);
Result<std::map<std::string, Tensor>> DecodeTensors(std::string_view bytes, std::string_view what);

// Typed reads of a frame's JSON: InvalidArgument naming `what` and the field when it is missing
// or of another type.
Result<std::string> GetString(const nlohmann::json& meta, const char* field, std::string_view what);
Result<int64_t> GetInt(const nlohmann::json& meta, const char* field, std::string_view what);
// An optional flag: `otherwise` when absent, InvalidArgument when not a boolean.
Result<bool> GetBool(const nlohmann::json& meta, const char* field, bool otherwise,
                     std::string_view what);
// An optional number: `otherwise` when absent, InvalidArgument when not a number.
Result<double> GetNumber(const nlohmann::json& meta, const char* field, double otherwise,
                         std::string_view what);
Result<std::vector<std::string>> GetStrings(const nlohmann::json& meta, const char* field,
                                            std::string_view what);

}  // namespace dflow::distributed
