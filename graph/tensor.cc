#include "graph/tensor.h"

#include <cstdint>

namespace dflow {

Buffer* Buffer::Allocate(Allocator* allocator, size_t bytes) {
  void* data = allocator->Allocate(bytes, kCpuAlignment);
  if (data == nullptr) return nullptr;
  allocator->Ref();
  return new Buffer(allocator, data, bytes, false);
}

Buffer* Buffer::Adopt(Allocator* allocator, void* data, size_t bytes, bool read_only) {
  allocator->Ref();
  return new Buffer(allocator, data, bytes, read_only);
}

void Buffer::Destroy() {
  allocator_->Deallocate(data_, size_);
  allocator_->Unref();
  delete this;
}

Tensor::Tensor(DType dtype, const Shape& shape) {
  auto t = Allocate(CpuAllocator::Default(), dtype, shape);
  DFLOW_CHECK(t.ok());
  *this = std::move(t).value();
}

Result<Tensor> Tensor::Allocate(Allocator* allocator, DType dtype, const Shape& shape) {
  if (dtype == DType::kInvalid) return InvalidArgument("cannot allocate a tensor of dtype invalid");
  if (!shape.fully_defined()) {
    return InvalidArgument("cannot allocate a tensor of shape {}: not fully defined", shape);
  }
  int64_t n = shape.num_elements();
  size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  if (n != 0 && bytes / static_cast<size_t>(n) != static_cast<size_t>(DTypeSize(dtype))) {
    return ResourceExhausted("tensor {}{} is too large to allocate on {}", DTypeName(dtype), shape,
                             allocator->device());
  }
  Buffer* buf = Buffer::Allocate(allocator, bytes);
  if (buf == nullptr) {
    if (size_t limit = allocator->limit(); limit != 0) {
      return ResourceExhausted(
          "device {} is out of memory: {} bytes for {}{} asked, {} in use, limit {} bytes",
          allocator->device(), bytes, DTypeName(dtype), shape, allocator->bytes_in_use(), limit);
    }
    return ResourceExhausted("out of memory on {} allocating {} bytes for {}{}",
                             allocator->device(), bytes, DTypeName(dtype), shape);
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.buf_ = buf;
  return t;
}

Tensor Tensor::Borrow(Allocator* owner, void* data, DType dtype, const Shape& shape) {
  DFLOW_CHECK(shape.fully_defined() && dtype != DType::kInvalid);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.buf_ = Buffer::Adopt(owner, data, t.num_bytes(), true);
  return t;
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (o.buf_) o.buf_->Ref();
  if (buf_) buf_->Unref();
  dtype_ = o.dtype_;
  known_bound_.store(o.known_bound(), std::memory_order_relaxed);
  shape_ = o.shape_;
  buf_ = o.buf_;
  offset_ = o.offset_;
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    if (buf_) buf_->Unref();
    dtype_ = o.dtype_;
    known_bound_.store(o.known_bound(), std::memory_order_relaxed);
    shape_ = o.shape_;
    buf_ = o.buf_;
    offset_ = o.offset_;
    o.buf_ = nullptr;
  }
  return *this;
}

const std::string& Tensor::device() const {
  static const std::string kNone;
  return buf_ ? buf_->allocator()->device() : kNone;
}

Tensor Tensor::Reshaped(const Shape& shape) const {
  DFLOW_CHECK(shape.num_elements() == num_elements());
  Tensor t(*this);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Part(int64_t first, const Shape& shape) const {
  DFLOW_CHECK(first >= 0 && first + shape.num_elements() <= num_elements());
  Tensor t(*this);
  t.shape_ = shape;
  t.offset_ += static_cast<size_t>(first) * DTypeSize(dtype_);
  return t;
}

Tensor Tensor::Clone() const {
  if (!valid()) return Tensor();
  Tensor t(dtype_, shape_);
  if (num_bytes() > 0) std::memcpy(t.raw_data(), raw_data(), num_bytes());
  t.known_bound_.store(known_bound(), std::memory_order_relaxed);
  return t;
}

bool Tensor::BitwiseEquals(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  return num_bytes() == 0 || std::memcmp(raw_data(), o.raw_data(), num_bytes()) == 0;
}

namespace {
// bf16 and f16 are shown through float.
float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    float f = static_cast<float>(mant) / 1024.0f / 16384.0f;
    return sign ? -f : f;
  }
  if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string ValueString(const Tensor& t, int64_t i) {
  const void* p = t.raw_data();
  switch (t.dtype()) {
    case DType::kF32:
      return fmt::format("{:g}", static_cast<const float*>(p)[i]);
    case DType::kF64:
      return fmt::format("{:g}", static_cast<const double*>(p)[i]);
    case DType::kF16:
      return fmt::format("{:g}", HalfToFloat(static_cast<const uint16_t*>(p)[i]));
    case DType::kBF16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return fmt::format("{:g}", f);
    }
    case DType::kI32:
      return fmt::format("{}", static_cast<const int32_t*>(p)[i]);
    case DType::kI64:
      return fmt::format("{}", static_cast<const int64_t*>(p)[i]);
    case DType::kU8:
      return fmt::format("{}", static_cast<const uint8_t*>(p)[i]);
    case DType::kBool:
      return static_cast<const bool*>(p)[i] ? "true" : "false";
    case DType::kInvalid:
      break;
  }
  return "?";
}
}  // namespace

std::string Tensor::DebugString(int max_values) const {
  if (!valid()) return "<empty>";
  std::string s = fmt::format("{}{} {{", DTypeName(dtype_), shape_);
  int64_t n = num_elements();
  if (!host_accessible()) return s + "on " + device() + "}";
  int64_t head = n <= max_values ? n : max_values / 2;
  for (int64_t i = 0; i < head; ++i) s += (i ? ", " : "") + ValueString(*this, i);
  if (head < n) {
    s += ", ...";
    for (int64_t i = n - (max_values - head); i < n; ++i) s += ", " + ValueString(*this, i);
  }
  return s + "}";
}

}  // namespace dflow
