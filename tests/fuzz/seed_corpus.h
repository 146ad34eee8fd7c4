// The seed corpus of the fuzz targets (scripts/fuzz.sh starts each target from it; the
// serialization tests hold every seed to the loaders' contract): valid graph files (binary and
// JSON, a training graph, a convolution, assigned devices), checkpoints, .npy arrays of every
// dtype, one header of each message between processes and a request's payload (each prefixed
// with the byte that picks its decoder), and ONNX models from Debian's libonnx-testdata.
#pragma once

#include <filesystem>

#include "graph/status.h"

namespace dflow::fuzz {

// Writes each fuzz target's seeds into a folder of DIR named after it: DIR/graph_file,
// DIR/checkpoint_file, DIR/npy, DIR/wire and DIR/onnx (made where missing). REQUIRES: the
// standard ops registered (ops::RegisterStandardOps).
Status WriteSeedCorpus(const std::filesystem::path& dir);

}  // namespace dflow::fuzz
