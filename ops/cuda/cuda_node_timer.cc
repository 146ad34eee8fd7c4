#include "ops/cuda/cuda_node_timer.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <utility>
#include <vector>

#include "ops/cuda/cuda_call.h"

namespace dflow::cuda {
namespace {

class CudaNodeTimer final : public NodeTimer {
 public:
  CudaNodeTimer(int ordinal, CudaStream stream, std::string device)
      : ordinal_(ordinal),
        stream_(reinterpret_cast<cudaStream_t>(stream)),
        device_(std::move(device)) {}

  ~CudaNodeTimer() override {
    OnDevice(ordinal_, [&] {
      for (const Span& s : spans_) {
        if (s.begin != nullptr) cudaEventDestroy(s.begin);
        if (s.end != nullptr) cudaEventDestroy(s.end);
      }
      for (const auto& [node, event] : open_) cudaEventDestroy(event);
      return 0;
    });
  }

  void Begin(int node) override {
    cudaEvent_t e = Record();
    std::lock_guard<std::mutex> lock(mu_);
    open_.emplace_back(node, e);
  }

  void End(int node) override {
    cudaEvent_t e = Record();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = open_.size(); i-- > 0;) {
      if (open_[i].first != node) continue;
      spans_.push_back({node, open_[i].second, e});
      open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    spans_.push_back({node, nullptr, e});  // no Begin: Collect reports it
  }

  Status Collect(std::vector<double>& seconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ != cudaSuccess) {
      return CudaError(failed_, "recording a node timer's event", device_);
    }
    if (!open_.empty()) {
      return Internal("node timer of {}: node {} began and never ended", device_,
                      open_.front().first);
    }
    std::vector<std::pair<int, float>> ms;
    ms.reserve(spans_.size());
    for (const Span& s : spans_) {
      if (s.begin == nullptr) {
        return Internal("node timer of {}: node {} ended without a beginning", device_, s.node);
      }
      if (s.node < 0 || static_cast<size_t>(s.node) >= seconds.size()) {
        return Internal("node timer of {}: node {} is outside the {} timed", device_, s.node,
                        seconds.size());
      }
      cudaError_t e = cudaEventSynchronize(s.end);
      float t = 0;
      if (e == cudaSuccess) e = cudaEventElapsedTime(&t, s.begin, s.end);
      if (e != cudaSuccess) return CudaError(e, "reading a node's time", device_);
      ms.emplace_back(s.node, t);
    }
    for (const auto& [node, t] : ms) seconds[node] += static_cast<double>(t) * 1e-3;
    return Status::OK();
  }

 private:
  struct Span {
    int node;
    cudaEvent_t begin, end;
  };

  // A timing event recorded on the stream now; null (and the error kept for Collect) when CUDA
  // fails.
  cudaEvent_t Record() {
    cudaEvent_t e = nullptr;
    cudaError_t r = OnDevice(ordinal_, [&] {
      cudaError_t c = cudaEventCreate(&e);
      if (c == cudaSuccess) c = cudaEventRecord(e, stream_);
      return c;
    });
    if (r != cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_ == cudaSuccess) failed_ = r;
    }
    return e;
  }

  const int ordinal_;
  const cudaStream_t stream_;
  const std::string device_;
  std::mutex mu_;
  std::vector<std::pair<int, cudaEvent_t>> open_;  // began, not yet ended
  std::vector<Span> spans_;
  cudaError_t failed_ = cudaSuccess;
};

}  // namespace

std::unique_ptr<NodeTimer> NewCudaNodeTimer(int ordinal, CudaStream stream, std::string device) {
  return std::make_unique<CudaNodeTimer>(ordinal, stream, std::move(device));
}

}  // namespace dflow::cuda
