#include "serialization/npy.h"

#include <cstring>
#include <optional>

#include "serialization/file_util.h"

namespace dflow::serialization {
namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);

struct Descr {
  DType dtype;
  const char* text;
};
constexpr Descr kDescrs[] = {{DType::kF32, "<f4"}, {DType::kF64, "<f8"}, {DType::kF16, "<f2"},
                             {DType::kI32, "<i4"}, {DType::kI64, "<i8"}, {DType::kU8, "|u1"},
                             {DType::kBool, "|b1"}};

// The value after 'key': in a header dict, up to the matching end.
std::optional<std::string_view> Field(std::string_view header, std::string_view key) {
  std::string quoted = "'" + std::string(key) + "'";
  size_t at = header.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  size_t colon = header.find(':', at + quoted.size());
  if (colon == std::string_view::npos) return std::nullopt;
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string_view::npos) return std::nullopt;
  char open = header[start];
  size_t end;
  if (open == '\'' || open == '"') {
    end = header.find(open, start + 1);
    if (end == std::string_view::npos) return std::nullopt;
    return header.substr(start + 1, end - start - 1);
  }
  if (open == '(') {
    end = header.find(')', start);
    if (end == std::string_view::npos) return std::nullopt;
    return header.substr(start + 1, end - start - 1);
  }
  end = header.find_first_of(",}", start);
  if (end == std::string_view::npos) return std::nullopt;
  return header.substr(start, end - start);
}

}  // namespace

Result<Tensor> DecodeNpy(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic) {
    return InvalidArgument("'{}' is not a .npy file (no \\x93NUMPY magic)", source);
  }
  int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, start;
  auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(bytes[i])); };
  if (major == 1) {
    header_len = byte(8) | byte(9) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return InvalidArgument("'{}': truncated .npy header", source);
    header_len = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    start = 12;
  } else {
    return InvalidArgument("'{}': .npy format version {} is not supported (1 to 3 are)", source,
                           major);
  }
  if (header_len > bytes.size() - start) {
    return InvalidArgument("'{}': the .npy header says {} bytes, the file has {}", source,
                           header_len, bytes.size() - start);
  }
  std::string_view header = bytes.substr(start, header_len);
  auto descr = Field(header, "descr");
  auto fortran = Field(header, "fortran_order");
  auto shape_text = Field(header, "shape");
  if (!descr || !fortran || !shape_text) {
    return InvalidArgument("'{}': the .npy header lacks descr, fortran_order or shape: {}", source,
                           header);
  }
  if (*fortran != "False") {
    return InvalidArgument(
        "'{}': Fortran-ordered arrays are not supported; save a C-ordered array "
        "(numpy.ascontiguousarray)",
        source);
  }
  std::string d(*descr);
  if (!d.empty() && d[0] == '=') d[0] = '<';  // native order, and this build is little-endian
  if (!d.empty() && d[0] == '>') {
    return InvalidArgument("'{}': big-endian data ('{}') is not supported; save it little-endian",
                           source, *descr);
  }
  DType dtype = DType::kInvalid;
  for (const auto& known : kDescrs) {
    std::string_view t = known.text;
    if (d == t || (t[0] == '|' && d.size() == t.size() && d.substr(1) == t.substr(1))) {
      dtype = known.dtype;
    }
  }
  if (dtype == DType::kInvalid) {
    return InvalidArgument("'{}': dtype '{}' is not supported (f4, f8, f2, i4, i8, u1, b1)", source,
                           *descr);
  }
  std::vector<int64_t> dims;
  std::string_view rest = *shape_text;
  while (true) {
    size_t b = rest.find_first_not_of(" ,");
    if (b == std::string_view::npos) break;
    size_t e = rest.find_first_of(" ,", b);
    std::string_view num = rest.substr(b, e == std::string_view::npos ? rest.size() - b : e - b);
    int64_t v = 0;
    for (char c : num) {
      if (c < '0' || c > '9' || v > (int64_t{1} << 50)) {
        return InvalidArgument("'{}': bad shape ({}) in the .npy header", source, *shape_text);
      }
      v = v * 10 + (c - '0');
    }
    dims.push_back(v);
    if (e == std::string_view::npos) break;
    rest = rest.substr(e);
  }
  auto shape = Shape::Make(dims);
  if (!shape.ok()) return shape.status().WithPrefix("'" + source + "': ");
  uint64_t need = static_cast<uint64_t>(DTypeSize(dtype));
  for (int64_t dim : dims) {
    if (__builtin_mul_overflow(need, static_cast<uint64_t>(dim), &need)) {
      return InvalidArgument("'{}': shape {} is too large", source, *shape);
    }
  }
  size_t have = bytes.size() - start - header_len;
  if (need != have) {
    return InvalidArgument("'{}': a {} array of shape {} needs {} bytes of data, the file has {}",
                           source, DTypeName(dtype), *shape, need, have);
  }
  Tensor t(dtype, *shape);
  if (have > 0) std::memcpy(t.raw_data(), bytes.data() + start + header_len, have);
  return t;
}

Result<Tensor> ReadNpy(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeNpy(bytes, path);
}

Result<std::string> EncodeNpy(const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& known : kDescrs) {
    if (known.dtype == t.dtype()) descr = known.text;
  }
  if (descr == nullptr) {
    return InvalidArgument("NumPy has no {} dtype; cast the tensor first", DTypeName(t.dtype()));
  }
  std::string shape;
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.shape().rank() > 1) shape.resize(shape.size() - 2);  // "(2, 3)"; "(4,)" keeps its comma
  if (t.shape().rank() == 1) shape.pop_back();
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  // Version 1.0 unless the header needs more than 16 bits; padded so data starts 64-aligned.
  bool v2 = header.size() + 1 + 10 > 65535;
  size_t prefix = v2 ? 12 : 10;
  size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  size_t len = header.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out.push_back(static_cast<char>(len >> (8 * i)));
  out += header;
  out.append(static_cast<const char*>(t.raw_data()), t.num_bytes());
  return out;
}

Status WriteNpy(const Tensor& t, const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeNpy(t));
  return WriteFileAtomically(path, bytes);
}

}  // namespace dflow::serialization
