// What dflow-run does with a .npy feed whose dtype is not its placeholder's.
//
// NumPy makes int64 integers by default (np.array([3, 1]), np.load of most label files), and
// dflow's label placeholders are int32, so int64 values are converted when every one fits int32.
// Any other mismatch is refused with the dtype to save the file in: converting floating-point
// values (f64 to f32) would silently change them.
#pragma once

#include <string>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace dflow::tools {

// `value`, read from `file` for the feed `feed` ("labels" or "labels:0"), made the dtype of that
// placeholder of `graph`. Unchanged when the dtypes agree, or when `feed` names no placeholder
// (the session reports that). InvalidArgument naming the feed, the file and the placeholder:
// for an int64 value outside int32 (with its value and index), and for any other dtype pair
// (with the dtype given and the one to use, in NumPy's spelling too).
Result<Tensor> MatchPlaceholderDType(const Graph& graph, const std::string& feed,
                                     const std::string& file, Tensor value);

}  // namespace dflow::tools
