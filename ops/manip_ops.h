// Builder functions for the ops that rearrange data: Transpose, Concat, Split, Slice, Pad, OneHot,
// WriteRows (which assembles a tensor piece by piece, from an Empty: array_ops.h), and
// CheckNumerics (which passes
// data through unchanged, or fails naming the node).
#pragma once

#include <string>
#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

// Output dimension i is input dimension perm[i].
Output Transpose(const Scope& scope, Output x, const std::vector<int64_t>& perm);
// Joins tensors along `axis` (negative counts from the end); the other dimensions must agree.
Output Concat(const Scope& scope, const std::vector<Output>& xs, int64_t axis);
// Cuts x into num_split equal pieces along `axis`; the dimension must divide evenly. Returns the
// pieces (none when the scope is in error).
std::vector<Output> Split(const Scope& scope, Output x, int64_t num_split, int64_t axis);
// Cuts x into pieces of the given sizes along `axis`; one size may be -1 for the rest.
std::vector<Output> SplitV(const Scope& scope, Output x, const std::vector<int64_t>& sizes,
                           int64_t axis);
// x with rows [offset, offset + y's rows) of its first dimension replaced by y (same dtype, and
// x's other dimensions). It writes into x's buffer when it is x's last reader and nobody else
// holds x, so a chain of WriteRows from an Empty assembles pieces as each comes, copying each
// once, where a Concat waits for all of them.
Output WriteRows(const Scope& scope, Output x, Output y, int64_t offset);
// x[begin[i] : begin[i] + size[i]] per dimension; size -1 means to the end.
Output Slice(const Scope& scope, Output x, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& size);
// Pads dimension i with paddings[2i] values before and paddings[2i+1] after.
Output Pad(const Scope& scope, Output x, const std::vector<int64_t>& paddings, double value = 0);
// indices [N] (i32/i64) -> [N, depth]: 1 at each index, 0 elsewhere; indices outside
// [0, depth) give a row of zeros.
Output OneHot(const Scope& scope, Output indices, int64_t depth, DType dtype = DType::kF32);
// x unchanged; InvalidArgument naming the node, `message` and the first bad index when x holds
// a NaN or an infinity.
Output CheckNumerics(const Scope& scope, Output x, const std::string& message);

}  // namespace dflow::ops
