// safetensors read/write (docs/design.md §6): weights, token sets and checkpoints.
//
// File layout (all integers little-endian):
//   [0, 8)        u64 N: byte length of the JSON header
//   [8, 8+N)      UTF-8 JSON object, optionally padded with trailing spaces:
//                   { "<name>": {"dtype": "F32", "shape": [d0, d1, ..],
//                                "data_offsets": [begin, end]},
//                     ..,
//                     "__metadata__": {"<key>": "<string value>", ..} }   (optional)
//   [8+N, EOF)    data buffer; tensor bytes live at [begin, end) relative to its start,
//                 row-major (C order), little-endian.
// Rules enforced on read: the header holds no NUL byte; end - begin == prod(shape) *
// element_size(dtype), and the shape's non-zero extents times the element size fit int64; the
// tensors' byte ranges, sorted by offset, each begin where the previous one ended (empty tensors
// included: none sits inside another tensor) and together cover the whole data buffer.
// Values are never judged (NaN/inf are read as stored); callers validate.
//
// Two layers: a Torch-free core (RawTensor: dtype + shape + bytes) and a LibTorch layer
// (TensorMap) built on it.
#pragma once

#include "models/io/tensor_map.h"  // TensorMap = std::map<std::string, at::Tensor>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace jacond::models {

/// Any problem reading or writing a safetensors file. what() is one line:
/// "<path>: <problem>".
class SafetensorsError : public std::runtime_error {
 public:
  SafetensorsError(const std::string& path, const std::string& problem);
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string path_;
  std::string problem_;
};

// ---------------------------------------------------------------------------------------------
// Torch-free core
// ---------------------------------------------------------------------------------------------

/// Element types we read and write (safetensors names: "F64", "F32", "F16", "BF16", "I64",
/// "I32", "U8"). Other safetensors dtypes (BOOL, I8, F8_*, ..) are rejected as unsupported.
enum class DType { F64, F32, F16, BF16, I64, I32, U8 };

/// The safetensors name of a dtype, e.g. DType::BF16 -> "BF16".
std::string to_string(DType dtype);
/// Inverse of to_string; throws std::invalid_argument for an unknown name.
DType parse_dtype(const std::string& name);
/// Bytes per element: 8, 4, 2, 2, 8, 4, 1.
std::size_t element_size(DType dtype);
/// True for F64, F32, F16, BF16.
bool is_floating(DType dtype);

/// One tensor as stored: bytes are row-major, little-endian, size prod(shape)*element_size.
struct RawTensor {
  DType dtype = DType::F64;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  std::vector<uint8_t> bytes;
};

/// A whole file: tensors by name, plus the optional string->string "__metadata__".
struct SafetensorsFile {
  std::map<std::string, RawTensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Read and validate a file (see the rules above). Throws SafetensorsError; text taken from
/// the file (names, dtypes, JSON) appears in its message only through printable()
/// (models/io/error_text.h).
SafetensorsFile read_safetensors(const std::string& path);

/// The same parser over bytes in memory (used by tests/fuzz); errors name `name` as the path.
SafetensorsFile parse_safetensors(const void* data, std::size_t size,
                                  const std::string& name = "<memory>");

/// Write a file atomically: the bytes go to "<path>.tmp.<pid>", which is then renamed onto
/// path, so a reader sees either the old file or the complete new one; the file and then its
/// directory are fsync'ed. The data buffer holds the tensors by element size descending, then
/// name, and the header is padded with spaces so that 8 + N is a multiple of 8: every tensor
/// starts at a file offset that is a multiple of its element size (zero-copy loaders need it).
/// Throws SafetensorsError (and leaves no temporary file) on any failure.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

/// Number of elements: prod(shape) (1 for a scalar). Throws std::invalid_argument for a
/// negative dimension or an overflowing product.
int64_t numel(const std::vector<int64_t>& shape);

/// Decode a tensor to doubles in row-major order (its shape is t.shape). Every dtype is
/// accepted; floating types convert exactly, I64 beyond 2^53 rounds to the nearest double.
/// Throws std::invalid_argument when bytes.size() != prod(shape) * element_size.
std::vector<double> to_doubles(const RawTensor& t);

/// Encode doubles (row-major, data.size() == prod(shape)) as dtype. Float narrowing rounds to
/// nearest, ties to even (F16/BF16 overflow to ±inf; NaN stays NaN). Integer dtypes require
/// every value to be an integer within the type's range. Throws std::invalid_argument.
RawTensor from_doubles(const std::vector<double>& data, std::vector<int64_t> shape,
                       DType dtype = DType::F64);

/// IEEE binary16 bits -> value (exact).
double half_bits_to_double(uint16_t bits);
/// bfloat16 bits (upper half of a binary32) -> value (exact).
double bf16_bits_to_double(uint16_t bits);
/// Value -> IEEE binary16 bits, round to nearest even.
uint16_t double_to_half_bits(double x);
/// Value -> bfloat16 bits, round to nearest even.
uint16_t double_to_bf16_bits(double x);

// ---------------------------------------------------------------------------------------------
// LibTorch layer
// ---------------------------------------------------------------------------------------------

/// Read a file: every tensor in its stored dtype, on the CPU, contiguous, owning its memory.
/// F64->kFloat64, F32->kFloat32, F16->kHalf, BF16->kBFloat16, I64->kLong, I32->kInt, U8->kByte.
/// When metadata is given, the file's "__metadata__" is stored there.
TensorMap load_safetensors(const std::string& path,
                           std::map<std::string, std::string>* metadata = nullptr);

/// The LibTorch layer of load_safetensors: every RawTensor as a tensor of its dtype and shape.
/// Consumes `file` (each tensor's bytes are released once copied).
TensorMap to_tensor_map(SafetensorsFile&& file);

/// Write tensors (any device, any strides; each is copied as .contiguous().cpu()) with
/// optional metadata, atomically as write_safetensors. Throws SafetensorsError for an
/// undefined tensor or a dtype outside the list above.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace jacond::models
