#include "rewrite/all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "graph/device_name.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/op_definitions.h"

namespace dflow::ops {
namespace {

// Checks the values against each other; the error names the first that differs.
Status CheckValues(const std::vector<Output>& values, const std::vector<std::string>& devices,
                   const AllReduceOptions& options) {
  if (values.empty()) return InvalidArgument("AllReduce needs at least one value");
  if (devices.size() != values.size()) {
    return InvalidArgument("AllReduce: {} values but {} devices", values.size(), devices.size());
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].valid()) return InvalidArgument("AllReduce: value {} is invalid", i);
  }
  const Output& first = values[0];
  if (!first.shape().fully_defined()) {
    return InvalidArgument("AllReduce: '{}' has shape {}; every dimension must be known",
                           first.name(), first.shape());
  }
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i].dtype() != first.dtype() || values[i].shape() != first.shape()) {
      return InvalidArgument("AllReduce: '{}' is {}{} but '{}' is {}{}", values[i].name(),
                             values[i].dtype(), values[i].shape(), first.name(), first.dtype(),
                             first.shape());
    }
  }
  if (options.reduction == Reduction::kMean && first.dtype() != DType::kF32 &&
      first.dtype() != DType::kF64) {
    return InvalidArgument("AllReduce: a mean of '{}' needs f32 or f64, not {}", first.name(),
                           first.dtype());
  }
  if (!options.hosts.empty() && options.hosts.size() != values.size()) {
    return InvalidArgument("AllReduce: {} values but {} hosts", values.size(),
                           options.hosts.size());
  }
  if (options.chunk_bytes < 0) {
    return InvalidArgument("AllReduce: chunk_bytes is {}; it must be >= 0", options.chunk_bytes);
  }
  return Status::OK();
}

// `name`, or name_1, name_2, ...: the first that no node of the graph is under.
std::string FreeNameScope(const Scope& scope, const std::string& name) {
  const Graph& g = scope.graph();
  for (int i = 0;; ++i) {
    std::string candidate = i == 0 ? name : fmt::format("{}_{}", name, i);
    const std::string prefix = fmt::format("{}{}/", scope.name_prefix(), candidate);
    bool taken = false;
    for (int id = 0; id < g.num_nodes() && !taken; ++id) {
      taken = g.node(id).name().starts_with(prefix);
    }
    if (!taken) return candidate;
  }
}

bool OnCpu(const std::string& device) {
  auto name = DeviceName::Parse(device);
  return name.ok() && name->type.value_or("CPU") == "CPU";
}

// _WriteRowsSum (manip_ops.cc): x with rows from `offset` set to scale * the sum of the ys;
// {that, a view of those rows}.
std::pair<Output, Output> WriteRowsSum(const Scope& on, Output x, const std::vector<Output>& ys,
                                       int64_t offset, double scale) {
  internal::RegisterOpDefinitions();
  std::vector<Output> inputs = {x};
  inputs.insert(inputs.end(), ys.begin(), ys.end());
  const int id = on.AddNode("_WriteRowsSum", inputs, {{"offset", offset}, {"scale", scale}});
  return {on.OutputOf(id, 0), on.OutputOf(id, 1)};
}

}  // namespace

std::vector<Output> AllReduce(const Scope& scope, const std::vector<Output>& values,
                              const std::vector<std::string>& devices,
                              const AllReduceOptions& options) {
  if (!scope.ok()) return {};
  if (Status s = CheckValues(values, devices, options); !s.ok()) {
    scope.UpdateStatus(s);
    return {};
  }
  const Scope base = scope.WithNameScope(FreeNameScope(scope, "all_reduce"));
  const auto n = static_cast<int64_t>(values.size());
  const DType dtype = values[0].dtype();
  const Shape shape = values[0].shape();
  const int64_t elements = shape.num_elements();
  std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
  std::vector<Scope> on;  // per replica: its device
  for (int64_t r = 0; r < n; ++r) on.push_back(base.WithDevice(devices[r]));
  auto finish = [&](int64_t r, Output total) {
    if (options.reduction == Reduction::kMean)
      total = Mul(on[r], total, ScalarConst(on[r], dtype, 1.0 / static_cast<double>(n)));
    return total;
  };

  std::vector<Output> out(n);
  // Replicas by host, in order of first appearance.
  std::vector<std::vector<int64_t>> by_host;
  for (int64_t r = 0; r < static_cast<int64_t>(options.hosts.size()); ++r) {
    auto same = std::find_if(by_host.begin(), by_host.end(), [&](const auto& members) {
      return options.hosts[members[0]] == options.hosts[r];
    });
    if (same == by_host.end()) {
      by_host.push_back({r});
    } else {
      same->push_back(r);
    }
  }
  if (by_host.size() >= 2 && static_cast<int64_t>(by_host.size()) < n) {
    // Each host's sum on its leader, the ring between leaders, the result back to the others.
    std::vector<Output> sums;
    std::vector<std::string> leaders;
    for (const auto& members : by_host) {
      const Scope& lead = on[members[0]];
      std::vector<Output> local;
      for (int64_t r : members) local.push_back(values[r]);
      sums.push_back(local.size() == 1 ? local[0] : AddN(lead, local));
      leaders.push_back(devices[members[0]]);
    }
    std::vector<Output> totals =
        AllReduce(base, sums, leaders, {Reduction::kSum, options.chunk_bytes, {}});
    if (!scope.ok()) return {};
    for (size_t h = 0; h < by_host.size(); ++h) {
      const int64_t leader = by_host[h][0];
      out[leader] = finish(leader, totals[h]);
      for (size_t m = 1; m < by_host[h].size(); ++m) {
        const int64_t r = by_host[h][m];
        out[r] = Identity(on[r], out[leader]);
      }
    }
    return scope.ok() ? out : std::vector<Output>();
  }
  if (n == 1 || elements < n) {
    // Too small to cut: summed on the first device and sent back.
    std::vector<Output> all;
    for (int64_t r = 0; r < n; ++r) all.push_back(Identity(on[0], values[r]));
    Output total = finish(0, n == 1 ? all[0] : AddN(on[0], all));
    out[0] = total;
    for (int64_t r = 1; r < n; ++r) out[r] = Identity(on[r], total);
    return scope.ok() ? out : std::vector<Output>();
  }

  // Pieces: segment j, chunk k is piece j * chunks + k; sizes differ by at most one element.
  const int64_t segment_bytes = elements / n * static_cast<int64_t>(DTypeSize(dtype));
  int64_t chunks =
      options.chunk_bytes > 0
          ? std::max<int64_t>(1, (segment_bytes + options.chunk_bytes - 1) / options.chunk_bytes)
          : 1;
  chunks = std::min(chunks, elements / n);
  const int64_t pieces = n * chunks;
  std::vector<int64_t> sizes(pieces, elements / pieces);
  for (int64_t p = 0; p < elements % pieces; ++p) sizes[p]++;

  // piece[r][p]: replica r's own piece p, on its device.
  std::vector<std::vector<Output>> piece(n);
  for (int64_t r = 0; r < n; ++r) {
    Output flat = Reshape(on[r], values[r], {elements});
    piece[r] = SplitV(on[r], flat, sizes, 0);
    if (!scope.ok()) return {};
  }
  auto mod = [n](int64_t i) { return ((i % n) + n) % n; };
  std::vector<int64_t> offsets(pieces + 1, 0);
  for (int64_t p = 0; p < pieces; ++p) offsets[p + 1] = offsets[p] + sizes[p];
  // On a CPU a replica's result is an Empty it fills piece by piece as each is ready (its own
  // totals first, then the others' in the order the all-gather brings them): most copying
  // happens while later pieces are on their way, where a Concat would wait for the last. Its own
  // totals are summed, scaled for a mean and written there in one pass (_WriteRowsSum), and what
  // it passes on is a view of those rows. Elsewhere (no other device has the kernels yet) an Add,
  // a Mul for a mean, and a Concat at the end.
  const double scale = options.reduction == Reduction::kMean ? 1.0 / static_cast<double>(n) : 1.0;
  std::vector<bool> fused(n);
  std::vector<Output> whole(n);
  for (int64_t r = 0; r < n; ++r) {
    fused[r] = OnCpu(devices[r]);
    if (fused[r]) whole[r] = Empty(on[r], Shape{elements}, dtype);
  }
  // result[r][p]: the reduced piece p on replica r's device.
  std::vector<std::vector<Output>> result(n, std::vector<Output>(pieces));
  for (int64_t k = 0; k < chunks; ++k) {
    // Reduce-scatter: `running[r]` is what replica r sends next, the running sum of segment
    // r - s at step s.
    std::vector<Output> running(n);
    for (int64_t r = 0; r < n; ++r) running[r] = piece[r][r * chunks + k];
    for (int64_t s = 0; s < n - 1; ++s) {
      std::vector<Output> next(n);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t to = mod(r + 1), p = mod(r - s) * chunks + k;
        if (s == n - 2 && fused[to]) {
          std::tie(whole[to], next[to]) =
              WriteRowsSum(on[to], whole[to], {piece[to][p], running[r]}, offsets[p], scale);
        } else {
          next[to] = Add(on[to], piece[to][p], running[r]);
        }
      }
      running = std::move(next);
    }
    // Replica r now holds the total of segment r + 1; all-gather passes the totals on.
    for (int64_t r = 0; r < n; ++r) {
      result[r][mod(r + 1) * chunks + k] = fused[r] ? running[r] : finish(r, running[r]);
    }
    for (int64_t s = 0; s < n - 1; ++s) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t to = mod(r + 1), p = mod(r + 1 - s) * chunks + k;
        result[to][p] = Identity(on[to], result[r][p]);
      }
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    if (fused[r]) {
      for (int64_t s = 1; s < n; ++s) {
        for (int64_t k = 0; k < chunks; ++k) {
          const int64_t p = mod(r + 1 - s) * chunks + k;
          whole[r] = WriteRowsSum(on[r], whole[r], {result[r][p]}, offsets[p], 1.0).first;
        }
      }
    } else {
      whole[r] = Concat(on[r], result[r], 0);
    }
    out[r] = Reshape(on[r], whole[r], dims);
  }
  return scope.ok() ? out : std::vector<Output>();
}

}  // namespace dflow::ops
