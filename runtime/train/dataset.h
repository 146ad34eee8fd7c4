// Datasets for training: the IDX format of the MNIST family (gzip-compressed or plain, read with
// zlib), Fashion-MNIST from Debian's dataset-fashion-mnist package, and a batcher with seeded
// shuffling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace dflow {

// Reads an IDX file of unsigned bytes into a u8 tensor of the file's shape. InvalidArgument
// naming the file for a bad magic number, an unsupported element type, or a size that does not
// match the header; NotFound when the file cannot be opened.
Result<Tensor> ReadIdx(const std::string& path);

struct Dataset {
  Tensor images;  // f32 [N, features], scaled to [0, 1]
  Tensor labels;  // i32 [N]
  int64_t size() const { return labels.num_elements(); }
};

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The training (60,000) or test (10,000) split, images flattened to 784 features.
Result<Dataset> LoadFashionMnist(bool train, const std::string& dir = kFashionMnistDir);

// Hands out a dataset in batches, reshuffled (seeded) at the start of every epoch.
class Batcher {
 public:
  // REQUIRES: batch_size > 0. With drop_last, a final partial batch is skipped.
  Batcher(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle = true,
          bool drop_last = true);

  // Starts an epoch (epoch 0, 1, ... give different but reproducible orders).
  void StartEpoch(int epoch);
  // The next batch of the epoch; false when the epoch is done.
  bool Next(Tensor* images, Tensor* labels);
  int64_t batches_per_epoch() const;

 private:
  const Dataset& data_;
  int64_t batch_size_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
};

}  // namespace dflow
