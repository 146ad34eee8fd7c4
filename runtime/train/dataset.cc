#include "runtime/train/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

namespace dflow {
namespace {

// Decompressed files larger than this are refused rather than read (the largest real IDX file,
// MNIST's training images, is 47 MB).
constexpr size_t kMaxIdxBytes = size_t{1} << 30;

Result<std::vector<uint8_t>> ReadAll(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound("cannot open '{}': {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  while (true) {
    int n = gzread(f, chunk, sizeof(chunk));
    if (n < 0) {
      int err = 0;
      std::string why = gzerror(f, &err);
      gzclose(f);
      return InvalidArgument("'{}' is corrupt: {}", path, why);
    }
    if (n == 0) break;
    if (bytes.size() + n > kMaxIdxBytes) {
      gzclose(f);
      return InvalidArgument("'{}' is larger than {} bytes once decompressed", path, kMaxIdxBytes);
    }
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  gzclose(f);
  return bytes;
}

}  // namespace

Result<Tensor> ReadIdx(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadAll(path));
  if (b.size() < 4 || b[0] != 0 || b[1] != 0) {
    return InvalidArgument("'{}' is not an IDX file: bad magic number", path);
  }
  if (b[2] != 0x08) {
    return InvalidArgument(
        "'{}': IDX element type 0x{:02x} is not supported (only unsigned "
        "bytes, 0x08)",
        path, b[2]);
  }
  int rank = b[3];
  if (rank < 1 || rank > Shape::kMaxRank) {
    return InvalidArgument("'{}': IDX rank {} is out of range", path, rank);
  }
  size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (b.size() < header) return InvalidArgument("'{}' is truncated inside its header", path);
  std::vector<int64_t> dims(rank);
  size_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = b.data() + 4 + 4 * i;
    dims[i] = (int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    elements *= static_cast<size_t>(dims[i]);
    if (elements > kMaxIdxBytes)
      return InvalidArgument("'{}': header declares too much data", path);
  }
  if (b.size() - header != elements) {
    return InvalidArgument("'{}': header declares {} bytes of data but the file holds {}", path,
                           elements, b.size() - header);
  }
  Tensor t(DType::kU8, Shape(dims));
  if (elements > 0) std::memcpy(t.raw_data(), b.data() + header, elements);
  return t;
}

Result<Dataset> LoadFashionMnist(bool train, const std::string& dir) {
  std::string prefix = dir + (train ? "/train" : "/t10k");
  std::string images_path = prefix + "-images-idx3-ubyte.gz";
  std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  ASSIGN_OR_RETURN(Tensor images, ReadIdx(images_path));
  ASSIGN_OR_RETURN(Tensor labels, ReadIdx(labels_path));
  if (images.shape().rank() != 3) {
    return InvalidArgument("'{}': expected [N, rows, cols] images, got {}", images_path,
                           images.shape());
  }
  if (labels.shape().rank() != 1 || labels.shape()[0] != images.shape()[0]) {
    return InvalidArgument("'{}' has {} labels but '{}' has {} images", labels_path,
                           labels.num_elements(), images_path, images.shape()[0]);
  }
  int64_t n = images.shape()[0], features = images.shape()[1] * images.shape()[2];
  Dataset d{Tensor(DType::kF32, Shape{n, features}), Tensor(DType::kI32, Shape{n})};
  const uint8_t* src = images.data<uint8_t>();
  float* dst = d.images.data<float>();
  for (int64_t i = 0; i < n * features; ++i) dst[i] = src[i] * (1.0f / 255.0f);
  for (int64_t i = 0; i < n; ++i) {
    int32_t label = labels.data<uint8_t>()[i];
    if (label > 9) {
      return InvalidArgument("'{}': label {} at index {} is outside [0, 10)", labels_path, label,
                             i);
    }
    d.labels.data<int32_t>()[i] = label;
  }
  return d;
}

Batcher::Batcher(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle,
                 bool drop_last)
    : data_(data), batch_size_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  DFLOW_CHECK(batch_size > 0);
  StartEpoch(0);
}

void Batcher::StartEpoch(int epoch) {
  order_.resize(data_.size());
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) {
    std::mt19937_64 gen(seed_ * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order_.begin(), order_.end(), gen);
  }
  pos_ = 0;
}

int64_t Batcher::batches_per_epoch() const {
  int64_t n = data_.size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

bool Batcher::Next(Tensor* images, Tensor* labels) {
  int64_t n = data_.size();
  int64_t remaining = n - pos_;
  if (remaining <= 0 || (drop_last_ && remaining < batch_size_)) return false;
  int64_t b = std::min(batch_size_, remaining);
  int64_t features = data_.images.shape()[1];
  *images = Tensor(DType::kF32, Shape{b, features});
  *labels = Tensor(DType::kI32, Shape{b});
  const float* src = data_.images.data<float>();
  float* dst = images->data<float>();
  for (int64_t i = 0; i < b; ++i) {
    int64_t row = order_[pos_ + i];
    std::memcpy(dst + i * features, src + row * features, sizeof(float) * features);
    labels->data<int32_t>()[i] = data_.labels.data<int32_t>()[row];
  }
  pos_ += b;
  return true;
}

}  // namespace dflow
