// The seed corpus of the fuzz targets (scripts/fuzz.sh starts each target from it; the
// serialization tests hold every seed to the loaders' contract): valid graph files (binary and
// JSON, a training graph, a convolution, assigned devices), checkpoints, .npy arrays of every
// dtype, one header of each message between processes and a request's payload (each prefixed
// with the byte that picks its decoder), and ONNX models from Debian's libonnx-testdata.
#pragma once

#include <filesystem>
#include <string_view>

#include "graph/status.h"

namespace dflow::fuzz {

// Writes the seeds into DIR/graph, DIR/checkpoint, DIR/npy, DIR/wire and DIR/onnx (made where
// missing). REQUIRES: the standard ops registered (ops::RegisterStandardOps).
Status WriteSeedCorpus(const std::filesystem::path& dir);

// The folder under DIR holding a fuzz target's seeds: graph_file -> graph, checkpoint_file ->
// checkpoint; npy, wire and onnx keep their names.
inline std::string_view SeedFolderOf(std::string_view target) {
  if (target == "graph_file") return "graph";
  if (target == "checkpoint_file") return "checkpoint";
  return target;
}

}  // namespace dflow::fuzz
