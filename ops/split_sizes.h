// Split's shape rule, shared by its definition (ops/defs/manip_defs.cc) and its kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/status.h"

namespace dflow::ops::internal {

// The sizes of Split's pieces along a dimension of size `dim` (-1: unknown): num_split equal
// pieces when `sizes` is empty, else `sizes` with at most one -1 standing for the rest. Entries
// are -1 where unknown until run time.
Result<std::vector<int64_t>> SplitSizes(int64_t dim, int64_t num_split,
                                        const std::vector<int64_t>& sizes);

}  // namespace dflow::ops::internal
