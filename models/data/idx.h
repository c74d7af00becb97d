// IDX files (the MNIST family's format), Torch-free so that the parser can be fuzzed alone
// (tests/fuzz/fuzz_idx.cpp links only idx.cpp and zlib).
//
// IDX format (big-endian):  magic u32 = 0x00000803 (u8 images, 3 dims) | 0x00000801 (u8 labels,
// 1 dim), then one u32 per dimension, then the u8 data row-major, nothing after it.
// A file is either plain IDX or gzip (RFC 1952, starting 1f 8b; several members are read as
// their concatenation, as gzip -d does; zero bytes after a member are skipped, as gzip -d and
// Python's gzip.decompress do; other bytes after the last member that are not another member
// are an error). One decoder serves files (read_idx) and memory (parse_idx); the Python
// decoder, python/jacond/data.py, accepts and rejects the same files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace jacond::models {

/// A malformed or missing IDX file: what() is one line "<path>: <problem>". Nothing taken from
/// the file reaches the message unsanitized (models/io/error_text.h).
class IdxError : public std::runtime_error {
 public:
  IdxError(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem) {}
};

/// A decoded IDX file: dims (each >= 1) and the raw u8 data (row-major, prod(dims) bytes).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Largest element count accepted (16 Gi); Fashion-MNIST's train images are 47 Mi.
inline constexpr uint64_t kIdxMaxElements = uint64_t{1} << 34;

/// Reads an IDX file (gzip or plain). `expected_rank` 3 for images, 1 for labels; the magic
/// must be 0x0000080{rank}. Throws IdxError for a missing file, wrong magic, zero or too large
/// dims, corrupt gzip data, truncated data or trailing bytes.
IdxArray read_idx(const std::string& path, int expected_rank);

/// The same decoder over `size` bytes in memory; errors name `name` as the path.
IdxArray parse_idx(const uint8_t* data, std::size_t size, int expected_rank,
                   const std::string& name = "<memory>");

/// Checks that an image file [N, H, W] and a label file [N] form one split: the same count N
/// and every label in [0, 10). Throws IdxError naming the offending file.
void check_idx_split(const IdxArray& images, const std::string& images_path,
                     const IdxArray& labels, const std::string& labels_path);

}  // namespace jacond::models
