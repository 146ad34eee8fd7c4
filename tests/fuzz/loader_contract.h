// What every file loader (and the decoder of every message between processes) promises on any
// bytes, checked by the fuzz targets (tests/fuzz) and by the regression corpus test
// (tests/serialization/fuzz_regressions_test.cc): either a value that encodes and decodes back to
// the same bytes, or an InvalidArgument that names the source. Each check returns "" when the
// promise holds, else what broke.
#pragma once

#include <string>
#include <string_view>

#include "dflow/version.h"
#include "distributed/messages.h"
#include "serialization/checkpoint_file.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#include "transport/ucx/wire.h"
#if DFLOW_HAS_ONNX
#include "onnx/onnx_import.h"
#endif

namespace dflow::fuzz {

inline std::string RefusalProblem(const Status& s, const std::string& source) {
  if (s.code() != StatusCode::kInvalidArgument) return "not an InvalidArgument: " + s.ToString();
  if (s.message().find(source) == std::string::npos) {
    return "the message does not name '" + source + "': " + s.ToString();
  }
  return "";
}

// A graph file in either form (what LoadGraph runs on a file's bytes).
inline std::string GraphFileProblem(std::string_view bytes) {
  const std::string source = "fuzz-input.dfg";
  std::vector<std::string> assigned;
  auto graph = serialization::DecodeGraph(bytes, source, &assigned);
  if (!graph.ok()) return RefusalProblem(graph.status(), source);
  if (assigned.size() != static_cast<size_t>(graph->num_nodes())) {
    return "assigned devices do not match the nodes";
  }
  const std::string encoded = serialization::EncodeGraph(*graph, assigned);
  std::vector<std::string> assigned_again;
  auto again = serialization::DecodeGraph(encoded, "re-encoded", &assigned_again);
  if (!again.ok()) return "a loaded graph does not load again: " + again.status().ToString();
  if (assigned_again != assigned) return "assigned devices changed in a round trip";
  if (serialization::EncodeGraph(*again, assigned_again) != encoded) {
    return "a loaded graph does not round-trip to the same bytes";
  }
  return "";
}

inline std::string CheckpointProblem(std::string_view bytes) {
  const std::string source = "fuzz-input.dfckpt";
  auto vars = serialization::DecodeCheckpoint(bytes, source);
  if (!vars.ok()) return RefusalProblem(vars.status(), source);
  unsigned sum = 0;
  for (const auto& [name, t] : *vars) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    for (size_t i = 0; i < t.num_bytes(); ++i) sum += p[i];  // ASan checks every byte
  }
  const std::string encoded = serialization::EncodeCheckpoint(*vars);
  auto again = serialization::DecodeCheckpoint(encoded, "re-encoded");
  if (!again.ok()) return "a loaded checkpoint does not load again: " + again.status().ToString();
  if (serialization::EncodeCheckpoint(*again) != encoded) {
    return "a loaded checkpoint does not round-trip to the same bytes";
  }
  volatile unsigned sink = sum;  // keeps the reads
  (void)sink;
  return "";
}

inline std::string NpyProblem(std::string_view bytes) {
  const std::string source = "fuzz-input.npy";
  auto t = serialization::DecodeNpy(bytes, source);
  if (!t.ok()) return RefusalProblem(t.status(), source);
  auto encoded = serialization::EncodeNpy(*t);
  if (!encoded.ok()) return "a loaded array does not encode: " + encoded.status().ToString();
  auto again = serialization::DecodeNpy(*encoded, "re-encoded");
  if (!again.ok()) return "an encoded array does not load: " + again.status().ToString();
  auto encoded_again = serialization::EncodeNpy(*again);
  if (!encoded_again.ok() || *encoded_again != *encoded) {
    return "a loaded array does not round-trip to the same bytes";
  }
  return "";
}

// A control message (distributed/messages.h), the one the first byte picks: refused as an
// InvalidArgument naming the message, or accepted and then encoded into bytes that decode and
// encode again to the same bytes.
template <typename M, typename Decode>
std::string ControlRoundTrip(std::string_view bytes, const Decode& decode,
                             const std::string& name) {
  Result<M> m = decode(bytes);
  if (!m.ok()) return RefusalProblem(m.status(), name);
  const std::string encoded = distributed::Encode(*m);
  Result<M> again = decode(encoded);
  if (!again.ok()) return "an encoded " + name + " does not decode: " + again.status().ToString();
  if (distributed::Encode(*again) != encoded) return "a " + name + " changed in a round trip";
  return "";
}

inline constexpr int kControlMessages = 13;
inline std::string ControlProblem(std::string_view bytes) {
  if (bytes.empty()) return "";
  using namespace distributed;
  const int which = static_cast<unsigned char>(bytes[0]) % kControlMessages;
  bytes.remove_prefix(1);
  switch (which) {
    case 0:
      return ControlRoundTrip<GetDevicesReply>(bytes, DecodeGetDevicesReply, "GetDevices reply");
    case 1:
      return ControlRoundTrip<CompileRequest>(bytes, DecodeCompileRequest, "Compile request");
    case 2:
      return ControlRoundTrip<RunStepRequest>(bytes, DecodeRunStepRequest, "RunStep request");
    case 3:
      return ControlRoundTrip<RunStepReply>(bytes, DecodeRunStepReply, "RunStep reply");
    case 4:
      return ControlRoundTrip<ReleaseRequest>(bytes, DecodeReleaseRequest, "Release request");
    case 5:
      return ControlRoundTrip<ConnectPeersRequest>(bytes, DecodeConnectPeersRequest,
                                                   "ConnectPeers request");
    case 6:
      return ControlRoundTrip<VariablesRequest>(bytes, DecodeVariablesRequest,
                                                "ReadVariables request");
    case 7:
      return ControlRoundTrip<VariableValues>(
          bytes,
          [](std::string_view b) { return DecodeVariableValues(b, "WriteVariables request"); },
          "WriteVariables request");
    case 8:
      return ControlRoundTrip<MeasureLinksRequest>(bytes, DecodeMeasureLinksRequest,
                                                   "MeasureLinks request");
    case 9:
      return ControlRoundTrip<MeasureLinksReply>(bytes, DecodeMeasureLinksReply,
                                                 "MeasureLinks reply");
    case 10:
      return ControlRoundTrip<RegisterRequest>(bytes, DecodeRegisterRequest, "Register request");
    case 11:
      return ControlRoundTrip<RegisterReply>(bytes, DecodeRegisterReply, "Register reply");
    default:
      return ControlRoundTrip<GetDevicesRequest>(bytes, DecodeGetDevicesRequest,
                                                 "GetDevices request");
  }
}

// The messages between processes (transport/wire.h) and the control messages they carry: the
// first byte picks the decoder (7: a control message, picked by the second byte; 13: a
// Challenge; 14: a Goodbye), the rest is
// the header (or the payload). A refusal is an InvalidArgument
// naming the message; an accepted header encodes back to the same bytes.
inline std::string WireProblem(std::string_view bytes) {
  if (bytes.empty()) return "";
  using namespace transport;
  const int which = static_cast<unsigned char>(bytes[0]) % 15;
  bytes.remove_prefix(1);
  if (which == 7) return ControlProblem(bytes);
  if (which == 6) {
    Status s = DecodeHeartbeat(bytes);
    if (!s.ok()) return RefusalProblem(s, "Heartbeat");
    return bytes == EncodeHeartbeat() ? "" : "an accepted heartbeat is not the one heartbeat";
  }

  if (which == 12) {
    auto ref = DecodeDeviceTensorRef(bytes);
    if (!ref.ok()) return RefusalProblem(ref.status(), "DeviceTensorRef");
    auto again = Encode(*ref);
    return again.ok() && *again == bytes ? "" : "an accepted DeviceTensorRef does not round-trip";
  }
  if (which == 14) {
    Status s = DecodeGoodbye(bytes);
    if (!s.ok()) return RefusalProblem(s, "Goodbye");
    return bytes == EncodeGoodbye() ? "" : "an accepted goodbye is not the one goodbye";
  }
  if (which == 13) {
    auto challenge = DecodeChallenge(bytes);
    if (!challenge.ok()) return RefusalProblem(challenge.status(), "Challenge");
    auto again = Encode(*challenge);
    return again.ok() && *again == bytes ? "" : "an accepted Challenge does not round-trip";
  }
  if (which == 11) {
    auto reads = DecodePeerReads(bytes);
    if (!reads.ok()) return RefusalProblem(reads.status(), "PeerReads");
    return bytes == Encode(*reads) ? "" : "an accepted PeerReads does not round-trip";
  }
  const char* names[] = {"Hello",        "HelloReply", "Tensor", "AbortStep", "CallRequest",
                         "CallResponse", "",           "",       "SameHost",  "TensorRef",
                         "TensorRefDone"};
  Result<std::string> again = std::string();
  Status refused;
  auto check = [&](auto decoded) {
    if (!decoded.ok()) {
      refused = decoded.status();
    } else {
      again = Encode(*decoded);
    }
  };
  switch (which) {
    case 0:
      check(DecodeHello(bytes));
      break;
    case 1:
      check(DecodeHelloReply(bytes));
      break;
    case 2:
      check(DecodeTensorHeader(bytes));
      break;
    case 3:
      check(DecodeAbortStep(bytes));
      break;
    case 4:
      check(DecodeCallRequest(bytes));
      break;
    case 8:
      check(DecodeSameHost(bytes));
      break;
    case 9:
      check(DecodeTensorRef(bytes));
      break;
    case 10:
      check(DecodeTensorRefDone(bytes));
      break;
    default:
      check(DecodeCallResponse(bytes));
      break;
  }
  if (!refused.ok()) return RefusalProblem(refused, names[which]);
  if (!again.ok()) return "an accepted header does not encode: " + again.status().ToString();
  if (*again != bytes) return "an accepted header does not round-trip to the same bytes";
  return "";
}

#if DFLOW_HAS_ONNX
// An ONNX model (onnx/onnx_import.h): a graph that validates, or a refusal naming the model,
// as InvalidArgument (malformed, failing ONNX's checks), Unimplemented (what dflow does not
// import) or NotFound (external data that is not there: the folder given does not exist, so no
// file outside is ever read).
inline std::string OnnxModelProblem(std::string_view bytes) {
  const std::string source = "fuzz-input.onnx";
  auto model = onnx::ImportModelBytes(bytes, source, "/nonexistent-dflow-fuzz-folder",
                                      {.max_model_bytes = size_t{64} << 20});
  if (!model.ok()) {
    const Status& s = model.status();
    if (s.code() == StatusCode::kUnimplemented || s.code() == StatusCode::kNotFound) {
      return s.message().find(source) == std::string::npos
                 ? "the message does not name '" + source + "': " + s.ToString()
                 : "";
    }
    return RefusalProblem(s, source);
  }
  if (Status s = model->graph.Validate(); !s.ok()) return "an imported graph does not validate";
  return "";
}
#endif

// The check of a fuzz target by its name: "graph_file", "checkpoint_file" or "npy" (the
// fuzzers' names and the prefixes of the kept regression inputs); nullptr for another name.
using ProblemCheck = std::string (*)(std::string_view bytes);
inline ProblemCheck ProblemCheckFor(std::string_view target) {
  if (target == "graph_file") return GraphFileProblem;
  if (target == "checkpoint_file") return CheckpointProblem;
  if (target == "npy") return NpyProblem;
  if (target == "wire") return WireProblem;
#if DFLOW_HAS_ONNX
  if (target == "onnx") return OnnxModelProblem;
#endif
  return nullptr;
}

}  // namespace dflow::fuzz
