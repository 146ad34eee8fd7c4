// Tensor: a dtype, a shape and a reference-counted buffer.
//
// Copying a Tensor shares its buffer (no data copy); the buffer returns to its allocator when
// the last Tensor referring to it goes. Buffers on the CPU are 64-byte aligned; a view (Part)
// starts inside its buffer, aligned to its element size only. A default-built Tensor is empty
// (valid() is false).
#pragma once

#include <atomic>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "graph/allocator.h"
#include "graph/dtype.h"
#include "graph/shape.h"
#include "graph/status.h"

namespace dflow {

// Memory shared by Tensors. Thread-safe reference count. Holds a reference to its allocator.
class Buffer {
 public:
  // Allocates `bytes` from `allocator`; null when it has no memory.
  static Buffer* Allocate(Allocator* allocator, size_t bytes);
  // Takes `bytes` at `data`, which the allocator handed out some other way (Tensor::Borrow).
  static Buffer* Adopt(Allocator* allocator, void* data, size_t bytes, bool read_only);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Allocator* allocator() const { return allocator_; }
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) Destroy();
  }
  // True when exactly one reference exists (the caller's) and the buffer is not read-only, so
  // the data may be overwritten.
  bool unique() const { return !read_only_ && refs_.load(std::memory_order_acquire) == 1; }
  bool read_only() const { return read_only_; }
  int refs() const { return refs_.load(std::memory_order_acquire); }

 private:
  Buffer(Allocator* allocator, void* data, size_t size, bool read_only)
      : allocator_(allocator), data_(data), size_(size), read_only_(read_only) {}
  void Destroy();

  std::atomic<int> refs_{1};
  Allocator* allocator_;
  void* data_;
  size_t size_;
  bool read_only_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates from the default CPU allocator; contents are uninitialised.
  // REQUIRES: shape fully defined. Aborts when out of memory: use Allocate for a Status.
  Tensor(DType dtype, const Shape& shape);
  // Allocates on `allocator`. InvalidArgument for a shape not fully defined; ResourceExhausted,
  // naming the device and the size, when memory runs out.
  static Result<Tensor> Allocate(Allocator* allocator, DType dtype, const Shape& shape);
  // A read-only tensor over memory that is not this process's to write (another process's,
  // mapped): no kernel overwrites it in place (buffer_unique() is false). When the last
  // reference goes, `owner->Deallocate(data, num_bytes)` runs, on whichever thread drops it.
  // REQUIRES: shape fully defined; `data` holds dtype * shape's bytes.
  static Tensor Borrow(Allocator* owner, void* data, DType dtype, const Shape& shape);

  // A CPU tensor holding `values` in row-major order. REQUIRES: sizes match.
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape);
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector<T>({value}, Shape{});
  }

  Tensor(const Tensor& o)
      : dtype_(o.dtype_),
        known_bound_(o.known_bound()),
        shape_(o.shape_),
        buf_(o.buf_),
        offset_(o.offset_) {
    if (buf_) buf_->Ref();
  }
  Tensor(Tensor&& o) noexcept
      : dtype_(o.dtype_),
        known_bound_(o.known_bound()),
        shape_(o.shape_),
        buf_(o.buf_),
        offset_(o.offset_) {
    o.buf_ = nullptr;
  }
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept;
  ~Tensor() {
    if (buf_) buf_->Unref();
  }

  bool valid() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  // Canonical device name of the memory; empty for an empty tensor.
  const std::string& device() const;
  // The allocator of the buffer; null for an empty tensor.
  Allocator* allocator() const { return buf_ ? buf_->allocator() : nullptr; }
  bool host_accessible() const { return !buf_ || buf_->allocator()->host_accessible(); }

  void* raw_data() const { return buf_ ? static_cast<char*>(buf_->data()) + offset_ : nullptr; }
  // How far into its buffer the data start (a Part's offset; 0 for most tensors): raw_data()
  // less this is what the allocator handed out.
  size_t byte_offset() const { return offset_; }
  // REQUIRES: DTypeOf<T> == dtype(). Aborts otherwise (a programmer error).
  template <typename T>
  T* data() const {
    DFLOW_CHECK(DTypeOf<T>::value == dtype_);
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  std::span<T> flat() const {
    return {data<T>(), static_cast<size_t>(num_elements())};
  }
  template <typename T>
  std::vector<T> ToVector() const {
    auto f = flat<T>();
    return {f.begin(), f.end()};
  }

  // A tensor of the same buffer seen with another shape. REQUIRES: same element count.
  Tensor Reshaped(const Shape& shape) const;
  // A view of `shape` whose data are this tensor's from element `first` on, sharing the buffer
  // (Split's contiguous pieces). It counts as a reference to the whole buffer, so neither it
  // nor the tensor is overwritten in place while the other lives.
  // REQUIRES: first + shape's elements <= num_elements().
  Tensor Part(int64_t first, const Shape& shape) const;
  // A new buffer holding a copy of the data (on the default CPU allocator).
  Tensor Clone() const;
  bool SharesBufferWith(const Tensor& o) const { return buf_ != nullptr && buf_ == o.buf_; }
  // True when this Tensor holds the only reference to its buffer and may write it.
  bool buffer_unique() const { return buf_ != nullptr && buf_->unique(); }
  bool buffer_read_only() const { return buf_ != nullptr && buf_->read_only(); }
  // Number of Tensors sharing the buffer (0 for an empty tensor).
  int buffer_refs() const { return buf_ ? buf_->refs() : 0; }

  // A bound the kernel that wrote this value vouched for: every element's magnitude is at most
  // known_bound(), so none is NaN or infinite; +infinity (the default) when nothing is known. A
  // convolution of bounded inputs and constant weights bounds its output (so the convolution
  // reading it needs no NaN check of its own, and one of them re-measures the value only when the
  // bound grows too large to rule out an overflow); a clip to finite limits bounds it by them;
  // pooling and layout changes keep it. A fact about the value, not the memory: copies, Reshaped,
  // Part and Clone keep it; a kernel that writes into an existing buffer
  // (ForwardOrAllocateOutput, a variable's update) clears it on the tensor it writes.
  float known_bound() const { return known_bound_.load(std::memory_order_relaxed); }
  bool known_finite() const { return known_bound() <= std::numeric_limits<float>::max(); }
  // REQUIRES: bound >= 0 (NaN counts as +infinity: nothing known).
  void set_known_bound(float bound) {
    known_bound_.store(bound >= 0 ? bound : std::numeric_limits<float>::infinity(),
                       std::memory_order_relaxed);
  }
  void clear_known_bound() { set_known_bound(std::numeric_limits<float>::infinity()); }
  // A reader that measured the value (the largest magnitude, +infinity for NaN) lowers the bound
  // to it, for the readers of this same Tensor after it (the other consumers of one output share
  // it), which may run on other threads. Only for values no one writes in place while they are
  // read (not a variable's).
  void NoteMeasuredBound(float bound) const {
    float seen = known_bound();
    while (bound < seen &&
           !known_bound_.compare_exchange_weak(seen, bound, std::memory_order_relaxed)) {
    }
  }

  // Same dtype, shape and bytes.
  bool BitwiseEquals(const Tensor& o) const;
  // "f32[2,3] {1, 2, 3, 4, 5, 6}", eliding the middle past `max_values` values.
  std::string DebugString(int max_values = 16) const;

 private:
  DType dtype_ = DType::kInvalid;
  mutable std::atomic<float> known_bound_{std::numeric_limits<float>::infinity()};
  Shape shape_;
  Buffer* buf_ = nullptr;
  size_t offset_ = 0;  // bytes into buf_ (a Part)
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, const Shape& shape) {
  Tensor t(DTypeOf<T>::value, shape);
  DFLOW_CHECK(static_cast<int64_t>(values.size()) == t.num_elements());
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) t.data<bool>()[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  }
  return t;
}

}  // namespace dflow
