// Graph files (docs/file_formats.md): a graph as FlatBuffers bytes (.dfg, identifier "DFG1",
// schema/graph.fbs), or as JSON text of the same schema that a person can read and edit.
//
//   RETURN_IF_ERROR(SaveGraph(graph, "model.dfg"));   // "model.json" writes the JSON form
//   ASSIGN_OR_RETURN(Graph g, LoadGraph("model.dfg")); // either form; validated
//
// A file is untrusted: the FlatBuffers verifier checks every offset and size first, then each
// value is checked as it is read and the graph is validated. A truncated, corrupt or hostile
// file gives InvalidArgument naming the file and what is wrong, never a crash or a huge
// allocation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace dflow::serialization {

// The version this build writes; files of a newer version are refused.
inline constexpr uint32_t kGraphFormatVersion = 1;

struct SaveGraphOptions {
  // The JSON form instead of FlatBuffers bytes. SaveGraph also picks it for a ".json" path.
  bool json = false;
  // Per node id, the device a placer assigned (empty: none); saved as assigned_device.
  std::vector<std::string> assigned_devices;
};

// The graph's nodes in id order with their attributes (defaults that validation filled in
// included). Written atomically.
Status SaveGraph(const Graph& graph, const std::string& path, const SaveGraphOptions& options = {});
// Reads either form (told apart by the identifier and the first character). `assigned`, when
// given, receives each node's assigned device ("" when none).
Result<Graph> LoadGraph(const std::string& path, std::vector<std::string>* assigned = nullptr);

// The same in memory (either form). `source` names where the bytes came from, for messages.
std::string EncodeGraph(const Graph& graph, const std::vector<std::string>& assigned = {});
Result<Graph> DecodeGraph(std::string_view bytes, const std::string& source,
                          std::vector<std::string>* assigned = nullptr);
// FlatBuffers bytes to JSON text and back (bytes verified first).
Result<std::string> GraphBytesToJson(std::string_view bytes, const std::string& source);
Result<std::string> GraphJsonToBytes(std::string_view json, const std::string& source);

}  // namespace dflow::serialization
