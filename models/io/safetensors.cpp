// safetensors read/write; the format is stated in safetensors.h.
#include "models/io/safetensors.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

#include "models/io/error_text.h"

// Tensor bytes are copied to and from memory as-is: the host must be little-endian, like the
// format. (The header length is assembled byte by byte and would be portable regardless.)
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");
#endif

namespace jacond::models {

using json = nlohmann::json;

namespace {

/// Largest header we accept: real headers are kilobytes; a bigger N means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// The reserved header key for string->string metadata.
constexpr const char* kMetadataKey = "__metadata__";

// ------------------------------------------------------------------------------------------
// Message helpers: every error is one line.
// ------------------------------------------------------------------------------------------

/// Escape control characters so the message stays on one line. Applied to the whole message,
/// whose path part comes from the caller (and may be UTF-8); text from the file has already
/// been through printable().
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// A name for a message: sanitized (it may come from a corrupt file) and quoted.
std::string quoted(const std::string& name) { return "'" + printable(name) + "'"; }

std::string tensor_label(const std::string& name) { return "tensor " + quoted(name); }

std::string range_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// prod(shape) * element size, or false on overflow / negative dims.
bool byte_count(const std::vector<int64_t>& shape, DType dtype, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  return !__builtin_mul_overflow(n, static_cast<uint64_t>(element_size(dtype)), out);
}

constexpr const char* kExtentsRule = "its non-zero extents times the element size overflow int64";

/// The non-zero extents times the element size fit int64. byte_count is 0 whenever one extent
/// is 0, however large the others are; but numel(), at::empty and numpy multiply every extent
/// in int64 and throw for [2, 2^63-1, 0], an exception no caller expects from a reader. The
/// rule of jacond's Python reader (python/jacond/safetensors.py), kept by reader and writer.
bool extents_fit_int64(const std::vector<int64_t>& shape, DType dtype) {
  int64_t span = static_cast<int64_t>(element_size(dtype));
  for (int64_t d : shape)
    if (d < 0 || (d != 0 && __builtin_mul_overflow(span, d, &span))) return false;
  return true;
}

// ------------------------------------------------------------------------------------------
// Small floats: sign | exponent (E bits, bias 2^(E-1)-1) | mantissa (M bits).
//   binary16: E=5, M=10.  bfloat16: E=8, M=7 (the top 16 bits of a binary32).
//   exponent all ones: inf (mantissa 0) or NaN; exponent 0: subnormal f·2^(1-bias-M).
// ------------------------------------------------------------------------------------------

double decode_small_float(uint16_t bits, int exp_bits, int mant_bits) {
  const int exp_all = (1 << exp_bits) - 1;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool negative = (bits >> 15) != 0;
  const int e = (bits >> mant_bits) & exp_all;
  const int f = bits & ((1 << mant_bits) - 1);
  double v;
  if (e == exp_all) {
    v = f ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(f), 1 - bias - mant_bits);
  } else {
    v = std::ldexp(static_cast<double>(f + (1 << mant_bits)), e - bias - mant_bits);
  }
  return negative ? -v : v;
}

/// Round x to the nearest small float, ties to even (nearbyint in the default rounding mode).
/// Overflow gives ±inf; NaN gives the quiet NaN with the sign of x.
uint16_t encode_small_float(double x, int exp_bits, int mant_bits) {
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - bias;  // exponent of the smallest normal
  const uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
  const uint32_t inf = sign | (exp_all << mant_bits);
  if (std::isnan(x)) return static_cast<uint16_t>(inf | (1u << (mant_bits - 1)));
  const double a = std::fabs(x);
  if (std::isinf(a)) return static_cast<uint16_t>(inf);
  if (a == 0.0) return static_cast<uint16_t>(sign);
  int E = 0;
  std::frexp(a, &E);
  int u = E - 1;  // a ∈ [2^u, 2^(u+1))
  if (u < emin) {
    // Subnormal: count units of 2^(emin-M). A result of 2^M carries into the smallest normal.
    const double q = std::nearbyint(std::ldexp(a, mant_bits - emin));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  if (u > bias) return static_cast<uint16_t>(inf);
  double q = std::nearbyint(std::ldexp(a, mant_bits - u));  // in [2^M, 2^(M+1)]
  if (q == std::ldexp(1.0, mant_bits + 1)) {
    q /= 2;
    ++u;
    if (u > bias) return static_cast<uint16_t>(inf);
  }
  const uint32_t mant = static_cast<uint32_t>(q) - (1u << mant_bits);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(u + bias) << mant_bits) | mant);
}

/// double -> float, round to nearest even, overflow to ±inf (a plain cast is UB out of range).
float narrow_to_float(double x) {
  const double a = std::fabs(x);
  if (std::isfinite(a) && a > static_cast<double>(FLT_MAX)) {
    // Halfway between FLT_MAX and 2^128 ties to 2^128 (FLT_MAX's mantissa is odd).
    const double halfway = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
    const float big = a >= halfway ? std::numeric_limits<float>::infinity() : FLT_MAX;
    return std::signbit(x) ? -big : big;
  }
  return static_cast<float>(x);
}

// ------------------------------------------------------------------------------------------
// Element access (little-endian host, so bytes copy as-is).
// ------------------------------------------------------------------------------------------

template <typename T>
T load_elem(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void store_elem(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

/// Integer value of x if x is an integer in [lo, hi]; throws std::invalid_argument otherwise.
int64_t checked_integer(double x, double lo, double hi_exclusive, DType dtype, std::size_t i) {
  if (!(std::isfinite(x) && x == std::trunc(x) && x >= lo && x < hi_exclusive)) {
    std::ostringstream msg;
    msg << "from_doubles: element " << i << " = " << x << " is not representable as "
        << to_string(dtype);
    throw std::invalid_argument(msg.str());
  }
  return static_cast<int64_t>(x);
}

// ------------------------------------------------------------------------------------------
// Reading: header parsing and layout checks.
// ------------------------------------------------------------------------------------------

/// One header entry after per-tensor validation.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

/// u64 from 8 little-endian bytes.
uint64_t decode_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

void encode_u64_le(uint64_t v, char* b) {
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// A JSON number that is a non-negative integer. nlohmann stores those as unsigned, except `-0`
/// (a signed 0), which Python's json, and so jacond.safetensors, reads as 0.
bool as_nonnegative_integer(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (!j.is_number_integer() || j.get<int64_t>() != 0) return false;
  *out = 0;
  return true;
}

DType parse_entry_dtype(const std::string& path, const std::string& name, const json& entry) {
  auto it = entry.find("dtype");
  if (it == entry.end() || !it->is_string())
    throw SafetensorsError(path, tensor_label(name) + ": missing or non-string \"dtype\"");
  const std::string s = it->get<std::string>();
  try {
    return parse_dtype(s);
  } catch (const std::invalid_argument&) {
    throw SafetensorsError(path,
                           tensor_label(name) + ": unknown or unsupported dtype " + quoted(s));
  }
}

std::vector<int64_t> parse_entry_shape(const std::string& path, const std::string& name,
                                       const json& entry) {
  auto it = entry.find("shape");
  if (it == entry.end() || !it->is_array())
    throw SafetensorsError(path, tensor_label(name) + ": missing or non-array \"shape\"");
  std::vector<int64_t> shape;
  for (const json& d : *it) {
    if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
      throw SafetensorsError(path, tensor_label(name) + ": shape " + json_snippet(*it) +
                                       " has a negative dimension " + json_snippet(d));
    uint64_t v = 0;
    if (!as_nonnegative_integer(d, &v))
      throw SafetensorsError(path, tensor_label(name) + ": shape " + json_snippet(*it) +
                                       " has a dimension that is not an integer");
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw SafetensorsError(path, tensor_label(name) + ": shape " + json_snippet(*it) +
                                       " has a dimension beyond int64");
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

/// data_offsets: exactly two non-negative integers with begin <= end.
std::pair<uint64_t, uint64_t> parse_entry_offsets(const std::string& path,
                                                  const std::string& name, const json& entry) {
  auto it = entry.find("data_offsets");
  uint64_t b = 0, e = 0;
  if (it == entry.end() || !it->is_array() || it->size() != 2 ||
      !as_nonnegative_integer((*it)[0], &b) || !as_nonnegative_integer((*it)[1], &e)) {
    const std::string got = it == entry.end() ? "missing" : json_snippet(*it);
    throw SafetensorsError(path, tensor_label(name) +
                                     ": data_offsets must be two non-negative integers "
                                     "[begin, end], got " + got);
  }
  if (b > e)
    throw SafetensorsError(path, tensor_label(name) + ": data_offsets [" + std::to_string(b) +
                                     ", " + std::to_string(e) + "] have begin > end");
  return {b, e};
}

/// Validate one tensor entry on its own: dtype, shape, offsets within the data buffer, and
/// end - begin == prod(shape) * element_size.
Entry parse_entry(const std::string& path, const std::string& name, const json& entry,
                  uint64_t data_size) {
  if (!entry.is_object())
    throw SafetensorsError(path, tensor_label(name) + ": header entry is not a JSON object");
  Entry out{name, parse_entry_dtype(path, name, entry), parse_entry_shape(path, name, entry), 0,
            0};
  std::tie(out.begin, out.end) = parse_entry_offsets(path, name, entry);
  if (out.end > data_size)
    throw SafetensorsError(path, tensor_label(name) + ": data_offsets " +
                                     range_str(out.begin, out.end) +
                                     " extend beyond the data buffer (" +
                                     std::to_string(data_size) + " bytes; file truncated?)");
  uint64_t need = 0;
  const bool ok = byte_count(out.shape, out.dtype, &need);
  if (!ok || need != out.end - out.begin)
    throw SafetensorsError(
        path, tensor_label(name) + ": data_offsets " + range_str(out.begin, out.end) + " hold " +
                  std::to_string(out.end - out.begin) + " bytes but " + to_string(out.dtype) +
                  " shape " + shape_str(out.shape) + " needs " +
                  (ok ? std::to_string(need) : std::string("more than 2^64 bytes")));
  if (!extents_fit_int64(out.shape, out.dtype))
    throw SafetensorsError(path, tensor_label(name) + ": shape " + shape_str(out.shape) + " of " +
                                     to_string(out.dtype) + " is too large (" + kExtentsRule + ")");
  return out;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& j) {
  if (!j.is_object())
    throw SafetensorsError(path, std::string(kMetadataKey) + " is not a JSON object");
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string())
      throw SafetensorsError(path, std::string(kMetadataKey) + " value for key " +
                                       quoted(it.key()) + " is not a string");
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

/// The tensors' byte ranges, sorted by offset, must tile [0, data_size): each begins where the
/// previous one ended. Empty tensors take part: one at [4, 4) inside a tensor at [0, 8) is an
/// overlap. (That is the rule of HF's reader and of jacond's Python reader; dropping empty
/// tensors from the check accepted files both reject.)
void check_layout(const std::string& path, std::vector<Entry> entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;        // [0, covered) is tiled so far
  const Entry* last = nullptr;  // the tensor ending at `covered`
  for (const Entry& e : entries) {
    if (e.begin < covered)
      throw SafetensorsError(path, tensor_label(e.name) + " data_offsets " +
                                       range_str(e.begin, e.end) + " overlap " +
                                       tensor_label(last->name) + " " +
                                       range_str(last->begin, last->end));
    if (e.begin > covered)
      throw SafetensorsError(path, "data buffer has a hole " + range_str(covered, e.begin) +
                                       " not covered by any tensor (before " +
                                       tensor_label(e.name) + ")");
    covered = e.end;
    last = &e;
  }
  if (covered < data_size)
    throw SafetensorsError(path, "data buffer has a hole " + range_str(covered, data_size) +
                                     " not covered by any tensor (at the end of the file)");
}

/// Where the bytes of a file come from: the file itself (read_safetensors), or memory
/// (parse_safetensors, the fuzz target). Everything after this point is one parser for both.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  /// Copies the n bytes at offset into out; false when they cannot be read.
  virtual bool read_at(uint64_t offset, void* out, std::size_t n) = 0;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw SafetensorsError(path, "is a directory, not a safetensors file");
    in_.open(path, std::ios::binary);
    if (!in_)
      throw SafetensorsError(path,
                             std::string("cannot open for reading: ") + std::strerror(errno));
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_.tellg();
    if (end < 0) throw SafetensorsError(path, "cannot determine the file size");
    size_ = static_cast<uint64_t>(end);
  }
  uint64_t size() const override { return size_; }
  bool read_at(uint64_t offset, void* out, std::size_t n) override {
    if (n == 0) return true;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    return static_cast<bool>(in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n)));
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, std::size_t size)
      : data_(static_cast<const uint8_t*>(data)), size_(size) {}
  uint64_t size() const override { return size_; }
  bool read_at(uint64_t offset, void* out, std::size_t n) override {
    if (offset > size_ || n > size_ - offset) return false;
    if (n > 0) std::memcpy(out, data_ + offset, n);
    return true;
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
};

/// Read the 8-byte header length N and check it against the file size.
uint64_t read_header_length(const std::string& path, ByteSource& src) {
  const uint64_t file_size = src.size();
  if (file_size < 8)
    throw SafetensorsError(path, "file is " + std::to_string(file_size) +
                                     " bytes, shorter than the 8-byte header length prefix");
  unsigned char b[8];
  if (!src.read_at(0, b, 8))
    throw SafetensorsError(path, "cannot read the 8-byte header length prefix");
  const uint64_t n = decode_u64_le(b);
  if (n > kMaxHeaderBytes)
    throw SafetensorsError(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                                     std::to_string(kMaxHeaderBytes) + " bytes (corrupt file?)");
  if (n > file_size - 8)
    throw SafetensorsError(path, "header length " + std::to_string(n) +
                                     " runs past the end of the file (" +
                                     std::to_string(file_size) + " bytes; file truncated?)");
  return n;
}

json parse_header_json(const std::string& path, ByteSource& src, uint64_t n) {
  std::string text(n, '\0');
  if (!src.read_at(8, text.data(), n))
    throw SafetensorsError(path, "cannot read the " + std::to_string(n) + "-byte header");
  json header;
  try {
    header = parse_json_strict(text);
  } catch (const std::invalid_argument& e) {
    throw SafetensorsError(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw SafetensorsError(path, "header is not a JSON object");
  return header;
}

/// The whole read: length prefix, header, per-tensor and layout checks, then the bytes.
SafetensorsFile read_source(const std::string& path, ByteSource& src) {
  const uint64_t n = read_header_length(path, src);
  const json header = parse_header_json(path, src, n);
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = src.size() - data_start;

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      out.metadata = parse_metadata(path, it.value());
    } else {
      entries.push_back(parse_entry(path, it.key(), it.value(), data_size));
    }
  }
  check_layout(path, entries, data_size);

  for (Entry& e : entries) {
    // e.end <= data_size (parse_entry): the allocation is bounded by the file's real size.
    RawTensor t{e.dtype, std::move(e.shape), std::vector<uint8_t>(e.end - e.begin)};
    if (!src.read_at(data_start + e.begin, t.bytes.data(), t.bytes.size()))
      throw SafetensorsError(path, tensor_label(e.name) + ": cannot read data_offsets " +
                                       range_str(e.begin, e.end) +
                                       " (file changed while reading?)");
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}


// ------------------------------------------------------------------------------------------
// Writing
// ------------------------------------------------------------------------------------------

/// The order of the tensors in the data buffer: element size descending, then name (HF's
/// writer does the same). The header pads the data start to 8 bytes, and every tensor is a
/// whole number of elements, so each tensor then begins at a multiple of its element size:
/// zero-copy loaders (mmap + torch.frombuffer, numpy views) need that alignment, and name order
/// put an F64 after an F16[3] at an odd offset. The header's keys stay in name order.
std::vector<const std::pair<const std::string, RawTensor>*> layout_order(const SafetensorsFile& f) {
  std::vector<const std::pair<const std::string, RawTensor>*> order;
  for (const auto& entry : f.tensors) order.push_back(&entry);
  // Stable: equal sizes keep std::map's name order.
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return element_size(a->second.dtype) > element_size(b->second.dtype);
  });
  return order;
}

/// The header JSON for tensors laid out back to back in layout_order, padded with spaces so
/// that 8 + N is a multiple of 8 (the data buffer then starts 8-byte aligned).
std::string build_header(const std::string& path, const SafetensorsFile& f) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto* item : layout_order(f)) {
    const std::string& name = item->first;
    const RawTensor& t = item->second;
    if (name == kMetadataKey)
      throw SafetensorsError(path, "a tensor may not be named " + quoted(kMetadataKey));
    uint64_t need = 0;
    const bool ok = byte_count(t.shape, t.dtype, &need);
    if (!ok || need != t.bytes.size())
      throw SafetensorsError(path, tensor_label(name) + ": has " + std::to_string(t.bytes.size()) +
                                       " bytes but " + to_string(t.dtype) + " shape " +
                                       shape_str(t.shape) + " needs " +
                                       (ok ? std::to_string(need) : std::string("a valid shape")));
    if (!extents_fit_int64(t.shape, t.dtype))  // a file the reader would reject
      throw SafetensorsError(path, tensor_label(name) + ": shape " + shape_str(t.shape) + " of " +
                                       to_string(t.dtype) + " is too large (" + kExtentsRule + ")");
    json entry = json::object();
    entry["dtype"] = to_string(t.dtype);
    entry["shape"] = json::array();
    for (int64_t d : t.shape) entry["shape"].push_back(d);
    entry["data_offsets"] = json::array({offset, offset + need});
    header[name] = std::move(entry);
    offset += need;
  }
  if (!f.metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : f.metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw SafetensorsError(path, std::string("cannot encode the header (names and metadata must "
                                             "be UTF-8): ") + json_error_text(e));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

/// Removes the temporary file unless committed (renamed onto the destination).
class TempFile {
 public:
  explicit TempFile(std::string name) : name_(std::move(name)) {}
  ~TempFile() {
    if (!committed_) std::remove(name_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& name() const { return name_; }
  void commit() { committed_ = true; }

 private:
  std::string name_;
  bool committed_ = false;
};

/// Flush a written file to stable storage, so the rename never exposes unwritten data
/// after a crash.
bool sync_file(const std::string& name) {
  const int fd = ::open(name.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  return ::close(fd) == 0 && ok;
}

/// Flush the directory holding `path`, so that the rename onto it survives a crash (the data's
/// fsync alone leaves the new directory entry in the page cache: after a power loss the file
/// may come back as the old version, or absent). Returns errno, 0 on success; a filesystem
/// without directory fsync (EINVAL) counts as success, there is nothing more to flush.
int sync_parent_directory(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return errno;
  int err = (::fsync(fd) == 0 || errno == EINVAL) ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

void write_bytes(const std::string& path, std::ofstream& out, const char* data, std::size_t n) {
  if (n > 0 && !out.write(data, static_cast<std::streamsize>(n)))
    throw SafetensorsError(path, std::string("write failed: ") + std::strerror(errno));
}

// ------------------------------------------------------------------------------------------
// Torch dtypes
// ------------------------------------------------------------------------------------------

at::ScalarType to_scalar_type(DType d) {
  switch (d) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::U8: return at::kByte;
  }
  throw std::invalid_argument("to_scalar_type: bad DType");
}

bool from_scalar_type(at::ScalarType s, DType* out) {
  switch (s) {
    case at::kDouble: *out = DType::F64; return true;
    case at::kFloat: *out = DType::F32; return true;
    case at::kHalf: *out = DType::F16; return true;
    case at::kBFloat16: *out = DType::BF16; return true;
    case at::kLong: *out = DType::I64; return true;
    case at::kInt: *out = DType::I32; return true;
    case at::kByte: *out = DType::U8; return true;
    default: return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

SafetensorsError::SafetensorsError(const std::string& path, const std::string& problem)
    : std::runtime_error(one_line(path + ": " + problem)), path_(path), problem_(problem) {}

std::string to_string(DType dtype) {
  switch (dtype) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
  }
  throw std::invalid_argument("to_string: bad DType " + std::to_string(static_cast<int>(dtype)));
}

DType parse_dtype(const std::string& name) {
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32,
                  DType::U8})
    if (to_string(d) == name) return d;
  throw std::invalid_argument("parse_dtype: unknown dtype '" + printable(name) + "'");
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::U8: return 1;
  }
  throw std::invalid_argument("element_size: bad DType");
}

bool is_floating(DType dtype) {
  return dtype == DType::F64 || dtype == DType::F32 || dtype == DType::F16 ||
         dtype == DType::BF16;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("numel: negative dimension in shape " + shape_str(shape));
    if (__builtin_mul_overflow(n, d, &n))
      throw std::invalid_argument("numel: element count of shape " + shape_str(shape) +
                                  " overflows int64");
  }
  return n;
}

double half_bits_to_double(uint16_t bits) { return decode_small_float(bits, 5, 10); }
double bf16_bits_to_double(uint16_t bits) { return decode_small_float(bits, 8, 7); }
uint16_t double_to_half_bits(double x) { return encode_small_float(x, 5, 10); }
uint16_t double_to_bf16_bits(double x) { return encode_small_float(x, 8, 7); }

std::vector<double> to_doubles(const RawTensor& t) {
  const std::size_t n = static_cast<std::size_t>(numel(t.shape));
  const std::size_t es = element_size(t.dtype);
  if (t.bytes.size() != n * es)
    throw std::invalid_argument("to_doubles: " + std::to_string(t.bytes.size()) + " bytes but " +
                                to_string(t.dtype) + " shape " + shape_str(t.shape) + " needs " +
                                std::to_string(n * es));
  std::vector<double> out(n);
  const uint8_t* p = t.bytes.data();
  for (std::size_t i = 0; i < n; ++i, p += es) {
    switch (t.dtype) {
      case DType::F64: out[i] = load_elem<double>(p); break;
      case DType::F32: out[i] = load_elem<float>(p); break;
      case DType::F16: out[i] = half_bits_to_double(load_elem<uint16_t>(p)); break;
      case DType::BF16: out[i] = bf16_bits_to_double(load_elem<uint16_t>(p)); break;
      case DType::I64: out[i] = static_cast<double>(load_elem<int64_t>(p)); break;
      case DType::I32: out[i] = load_elem<int32_t>(p); break;
      case DType::U8: out[i] = *p; break;
    }
  }
  return out;
}

RawTensor from_doubles(const std::vector<double>& data, std::vector<int64_t> shape, DType dtype) {
  const std::size_t n = static_cast<std::size_t>(numel(shape));
  if (data.size() != n)
    throw std::invalid_argument("from_doubles: " + std::to_string(data.size()) +
                                " values for shape " + shape_str(shape) + " (needs " +
                                std::to_string(n) + ")");
  const std::size_t es = element_size(dtype);
  RawTensor t{dtype, std::move(shape), std::vector<uint8_t>(n * es)};
  uint8_t* p = t.bytes.data();
  constexpr double two63 = 9223372036854775808.0;  // 2^63
  for (std::size_t i = 0; i < n; ++i, p += es) {
    const double x = data[i];
    switch (dtype) {
      case DType::F64: store_elem<double>(p, x); break;
      case DType::F32: store_elem<float>(p, narrow_to_float(x)); break;
      case DType::F16: store_elem<uint16_t>(p, double_to_half_bits(x)); break;
      case DType::BF16: store_elem<uint16_t>(p, double_to_bf16_bits(x)); break;
      case DType::I64: store_elem<int64_t>(p, checked_integer(x, -two63, two63, dtype, i)); break;
      case DType::I32:
        store_elem<int32_t>(p, static_cast<int32_t>(
                                   checked_integer(x, -2147483648.0, 2147483648.0, dtype, i)));
        break;
      case DType::U8: *p = static_cast<uint8_t>(checked_integer(x, 0.0, 256.0, dtype, i)); break;
    }
  }
  return t;
}

SafetensorsFile read_safetensors(const std::string& path) {
  FileSource src(path);
  return read_source(path, src);
}

SafetensorsFile parse_safetensors(const void* data, std::size_t size, const std::string& name) {
  MemorySource src(data, size);
  return read_source(name, src);
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  const std::string header = build_header(path, file);  // validates before touching disk
  TempFile tmp(path + ".tmp." + std::to_string(static_cast<long>(::getpid())));
  {
    std::ofstream out(tmp.name(), std::ios::binary | std::ios::trunc);
    if (!out)
      throw SafetensorsError(path, "cannot open temporary file " + quoted(tmp.name()) +
                                       " for writing: " + std::strerror(errno));
    char len[8];
    encode_u64_le(header.size(), len);
    write_bytes(path, out, len, 8);
    write_bytes(path, out, header.data(), header.size());
    for (const auto* item : layout_order(file))  // the order build_header gave the offsets
      write_bytes(path, out, reinterpret_cast<const char*>(item->second.bytes.data()),
                  item->second.bytes.size());
    out.close();
    if (!out) throw SafetensorsError(path, std::string("write failed: ") + std::strerror(errno));
  }
  if (!sync_file(tmp.name()))
    throw SafetensorsError(path, std::string("fsync of the temporary file failed: ") +
                                     std::strerror(errno));
  if (std::rename(tmp.name().c_str(), path.c_str()) != 0)
    throw SafetensorsError(path, "cannot rename " + quoted(tmp.name()) + " onto it: " +
                                     std::strerror(errno));
  tmp.commit();
  if (const int err = sync_parent_directory(path))
    throw SafetensorsError(path, std::string("written, but fsync of its directory failed (the "
                                             "rename may not survive a crash): ") +
                                     std::strerror(err));
}

TensorMap to_tensor_map(SafetensorsFile&& file) {
  TensorMap out;
  for (auto& [name, raw] : file.tensors) {
    at::Tensor t = at::empty(raw.shape, at::TensorOptions().dtype(to_scalar_type(raw.dtype)));
    if (!raw.bytes.empty()) std::memcpy(t.data_ptr(), raw.bytes.data(), raw.bytes.size());
    std::vector<uint8_t>().swap(raw.bytes);  // release as we go: peak ~ file + one tensor
    out.emplace(name, std::move(t));
  }
  return out;
}

TensorMap load_safetensors(const std::string& path,
                           std::map<std::string, std::string>* metadata) {
  SafetensorsFile file = read_safetensors(path);
  if (metadata) *metadata = std::move(file.metadata);  // to_tensor_map reads only .tensors
  return to_tensor_map(std::move(file));
}

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  SafetensorsFile file;
  file.metadata = metadata;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw SafetensorsError(path, tensor_label(name) + " is undefined");
    if (t.layout() != at::kStrided)
      throw SafetensorsError(path,
                             tensor_label(name) + ": only dense (strided) tensors can be saved");
    DType dtype;
    if (!from_scalar_type(t.scalar_type(), &dtype))
      throw SafetensorsError(path, tensor_label(name) + ": unsupported dtype " +
                                       std::string(c10::toString(t.scalar_type())));
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    RawTensor raw{dtype, c.sizes().vec(), std::vector<uint8_t>(c.nbytes())};
    if (!raw.bytes.empty()) std::memcpy(raw.bytes.data(), c.data_ptr(), raw.bytes.size());
    file.tensors.emplace(name, std::move(raw));
  }
  write_safetensors(path, file);
}

}  // namespace jacond::models
