#include "ops/split_sizes.h"

#include "graph/attr_value.h"

namespace dflow::ops::internal {

Result<std::vector<int64_t>> SplitSizes(int64_t dim, int64_t num_split,
                                        const std::vector<int64_t>& sizes) {
  if (num_split < 1) return InvalidArgument("num_split is {} (must be >= 1)", num_split);
  if (sizes.empty()) {
    if (dim >= 0 && dim % num_split != 0) {
      return InvalidArgument("dimension of size {} does not split into {} equal pieces", dim,
                             num_split);
    }
    return std::vector<int64_t>(num_split, dim < 0 ? -1 : dim / num_split);
  }
  if (static_cast<int64_t>(sizes.size()) != num_split) {
    return InvalidArgument("{} sizes given for {} pieces", sizes.size(), num_split);
  }
  int64_t known = 0, rest = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && rest < 0) {
      rest = static_cast<int64_t>(i);
    } else if (sizes[i] < 0) {
      return InvalidArgument("sizes {} may hold one -1 and otherwise sizes >= 0",
                             AttrValueString(sizes));
    } else {
      known += sizes[i];
    }
  }
  std::vector<int64_t> out = sizes;
  if (dim < 0) return out;
  if (known > dim || (rest < 0 && known != dim)) {
    return InvalidArgument("sizes {} do not add up to the dimension's size {}",
                           AttrValueString(sizes), dim);
  }
  if (rest >= 0) out[rest] = dim - known;
  return out;
}

}  // namespace dflow::ops::internal
