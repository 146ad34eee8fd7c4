// Placement pass 2: costs. For every node and device, the seconds the node takes there; for
// every data edge, the bytes it carries; for every node, the bytes it keeps alive across steps.
//
//   compute(node, device) = measured seconds when a cost file has them, else
//                           launch overhead + max(FLOPs / peak FLOP/s, bytes / bandwidth)
//   transfer(edge, from, to) = link latency + bytes / link bandwidth, plus the launch overhead
//                              of the Send on `from` and of the Recv on `to` (0 on one device);
//                              on a link between processes transfers queue (the simulated step
//                              in placer.h sends one tensor at a time per link)
//   persistent(node) = the bytes of a Variable's value or a Const's (0 for other nodes)
//   activation(node) = the bytes of its outputs while they live, except for outputs that
//                      are no new memory: a Variable's or Const's value (persistent), what a
//                      stateful op
//                      writing a variable returns (the variable itself), and values computed
//                      only to be assigned to variables (initializers, which run in a step of
//                      their own before training)
//
// Dimensions unknown before run time (usually the batch) count as `unknown_dim`.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "placer/device_set.h"

namespace dflow {

// Seconds per node measured by a profiled run, keyed by device (canonical name, or a device type
// such as "CPU" for every device of that type) and node name.
struct MeasuredCosts {
  std::map<std::string, std::map<std::string, double>> seconds;

  // The JSON form: {"version": 1, "devices": {"CPU": {"node": 1.5e-5, ...}, ...}}.
  static Result<MeasuredCosts> Load(const std::string& path);
  Status Save(const std::string& path) const;
};

// The node times of profiled runs, summed per device key and node, averaged by Means(). Sends
// and Recvs are left out: their time is a transfer, which the cost model takes from links.
class CostProfile {
 public:
  void Add(const std::string& device, const std::string& node, const std::string& op,
           double seconds);
  MeasuredCosts Means() const;

 private:
  std::map<std::string, std::unordered_map<std::string, std::pair<double, int>>> totals_;
};

struct CostOptions {
  int64_t unknown_dim = 32;
  const MeasuredCosts* measured = nullptr;
};

class CostModel {
 public:
  // REQUIRES: graph validated.
  static Result<CostModel> Build(const Graph& graph, const DeviceSet& devices,
                                 const CostOptions& options = {});

  double Compute(int node, int device) const { return compute_[node * num_devices_ + device]; }
  double OutputBytes(int node, int output) const {
    return output_bytes_[first_output_[node] + output];
  }
  double PersistentBytes(int node) const { return persistent_[node]; }
  double ActivationBytes(int node) const { return activation_[node]; }
  // Bytes of the tensors a node produces (all outputs).
  double TotalOutputBytes(int node) const;
  double Transfer(double bytes, int from, int to) const {
    if (from == to) return 0;
    return devices_->Link(from, to).Seconds(bytes) + overhead_[from] + overhead_[to];
  }
  // Whether transfers from `from` to `to` queue on their link (LinkSpec::queues).
  bool Queues(int from, int to) const { return from != to && devices_->Link(from, to).queues; }
  // The seconds a transfer occupies a link that queues: its bytes at the link's bandwidth.
  double Occupancy(double bytes, int from, int to) const {
    const LinkSpec link = devices_->Link(from, to);
    return link.bandwidth > 0 ? bytes / link.bandwidth : 0;
  }
  int num_devices() const { return num_devices_; }

 private:
  const DeviceSet* devices_ = nullptr;
  int num_devices_ = 0;
  std::vector<double> compute_;
  std::vector<double> output_bytes_;   // every node's outputs, node after node
  std::vector<int64_t> first_output_;  // node -> its first entry in output_bytes_
  std::vector<double> persistent_;
  std::vector<double> activation_;
  std::vector<double> overhead_;  // per device: launch overhead
};

}  // namespace dflow
