// IDX decoding; the format is stated in idx.h.
#include "models/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "models/io/error_text.h"

namespace jacond::models {

namespace {

/// Raw (possibly gzip-compressed) bytes in order, from a file or from memory.
class RawInput {
 public:
  virtual ~RawInput() = default;
  /// Up to n bytes into out; returns 0 only at the end.
  virtual std::size_t read(uint8_t* out, std::size_t n) = 0;
};

class FileInput final : public RawInput {
 public:
  explicit FileInput(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) throw IdxError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  std::size_t read(uint8_t* out, std::size_t n) override {
    const std::size_t got = std::fread(out, 1, n, f_.get());
    if (got == 0 && std::ferror(f_.get()))
      throw IdxError(path_, std::string("read error: ") + std::strerror(errno));
    return got;
  }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }  // read-only: nothing to lose
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> f_;
};

class MemoryInput final : public RawInput {
 public:
  MemoryInput(const uint8_t* data, std::size_t size) : data_(data), left_(size) {}
  std::size_t read(uint8_t* out, std::size_t n) override {
    const std::size_t k = std::min(n, left_);
    if (k > 0) std::memcpy(out, data_, k);
    data_ += k;
    left_ -= k;
    return k;
  }

 private:
  const uint8_t* data_;
  std::size_t left_;
};

/// The decompressed bytes of a RawInput: gzip (detected by its magic 1f 8b) or passed through.
class IdxStream {
 public:
  IdxStream(RawInput& raw, const std::string& path)
      : raw_(raw), path_(path), buf_(new uint8_t[kBufSize]) {
    while (len_ < 2 && refill_append()) {
    }
    gzip_ = len_ >= 2 && buf_[0] == 0x1f && buf_[1] == 0x8b;
    if (gzip_) {
      // 15 + 16: a 32 KiB window, gzip wrapper only (header and CRC-32/length trailer checked).
      if (inflateInit2(&z_, 15 + 16) != Z_OK) throw IdxError(path_, "zlib: cannot initialise");
      z_.next_in = buf_.get();
      z_.avail_in = static_cast<uInt>(len_);
    }
  }
  ~IdxStream() {
    if (gzip_) inflateEnd(&z_);
  }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  /// Up to n decompressed bytes into out; fewer only at the end of the data.
  std::size_t read(uint8_t* out, std::size_t n) { return gzip_ ? inflate_into(out, n) : copy_into(out, n); }

 private:
  /// Appends raw bytes after buf_[0, len_); false at the end of the input.
  bool refill_append() {
    if (raw_eof_ || len_ == kBufSize) return false;
    const std::size_t got = raw_.read(buf_.get() + len_, kBufSize - len_);
    if (got == 0) raw_eof_ = true;
    len_ += got;
    return got > 0;
  }

  std::size_t copy_into(uint8_t* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      if (pos_ == len_) {
        pos_ = len_ = 0;
        if (!refill_append()) break;
      }
      const std::size_t k = std::min(n - done, len_ - pos_);
      std::memcpy(out + done, buf_.get() + pos_, k);
      pos_ += k;
      done += k;
    }
    return done;
  }

  /// More compressed input for zlib once it has consumed all it had; false at the end.
  bool refill_z() {
    len_ = 0;
    const bool more = refill_append();
    z_.next_in = buf_.get();
    z_.avail_in = static_cast<uInt>(len_);
    return more;
  }

  std::size_t inflate_into(uint8_t* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !ended_) {
      if (z_.avail_in == 0) refill_z();
      z_.next_out = out + done;
      z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n - done, UINT_MAX));
      const uInt room = z_.avail_out;
      const uInt had = z_.avail_in;
      const int ret = inflate(&z_, Z_NO_FLUSH);
      done += room - z_.avail_out;
      if (ret == Z_STREAM_END) {
        // End of one gzip member: the input ends here, or another member follows, after any
        // number of zero bytes. Zero padding (tape blocks, fixed-size records) is skipped as
        // gzip(1) ("trailing zero bytes ignored") and Python's gzip.decompress do; the Python
        // decoder (python/jacond/data.py) uses the latter, so both accept the same files. Any
        // other byte that does not start a member is an error in both.
        for (;;) {
          while (z_.avail_in > 0 && z_.next_in[0] == 0) {
            ++z_.next_in;
            --z_.avail_in;
          }
          if (z_.avail_in > 0 || !refill_z()) break;
        }
        if (z_.avail_in == 0) {
          ended_ = true;
        } else if (z_.next_in[0] != 0x1f) {
          throw IdxError(path_, "trailing bytes after the gzip data");
        } else if (inflateReset(&z_) != Z_OK) {
          throw IdxError(path_, "zlib: cannot reset for the next gzip member");
        }
      } else if (ret == Z_OK || ret == Z_BUF_ERROR) {
        // Room for output left means zlib wants input; none is left at the end of the input.
        if (z_.avail_out != 0 && z_.avail_in == 0 && raw_eof_)
          throw IdxError(path_, "gzip error: truncated data (unexpected end of file)");
        // zlib guarantees progress while it has input and room; guard the loop regardless.
        if (ret == Z_BUF_ERROR && z_.avail_in == had && z_.avail_out == room && had != 0)
          throw IdxError(path_, "gzip error: no progress");
      } else {
        // zlib's msg is one of its own static strings; sanitized all the same.
        throw IdxError(path_, "gzip error: " + printable(z_.msg ? z_.msg : "code " + std::to_string(ret)));
      }
    }
    return done;
  }

  RawInput& raw_;
  const std::string& path_;
  static constexpr std::size_t kBufSize = std::size_t{1} << 16;
  std::unique_ptr<uint8_t[]> buf_;  // raw input: [pos_, len_) unread (plain), or zlib's next_in
  std::size_t pos_ = 0, len_ = 0;
  bool raw_eof_ = false;
  bool gzip_ = false;
  bool ended_ = false;  // gzip: the last member ended with the input
  z_stream z_{};
};

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

IdxArray parse_stream(IdxStream& in, int expected_rank, const std::string& path) {
  if (expected_rank < 1 || expected_rank > 255)
    throw std::invalid_argument("read_idx: expected_rank must be in [1, 255], got " +
                                std::to_string(expected_rank));
  uint8_t head[4];
  if (in.read(head, 4) != 4) throw IdxError(path, "truncated: no IDX magic");
  const uint32_t magic = big_endian_u32(head);
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(expected_rank);
  if (magic != expected)
    throw IdxError(path, "bad IDX magic " + hex(magic) + ", expected " + hex(expected) +
                             " (u8 data, " + std::to_string(expected_rank) + " dims)");

  IdxArray a;
  uint64_t total = 1;
  for (int k = 0; k < expected_rank; ++k) {
    if (in.read(head, 4) != 4) throw IdxError(path, "truncated IDX header");
    const uint32_t dim = big_endian_u32(head);
    if (dim == 0) throw IdxError(path, "IDX dimension " + std::to_string(k) + " is zero");
    a.dims.push_back(dim);
    // Checked before it can wrap: 2^34 * 2^32 would overflow 64 bits and "match" empty data.
    if (__builtin_mul_overflow(total, uint64_t{dim}, &total) || total > kIdxMaxElements)
      throw IdxError(path, "IDX dimensions too large (more than 2^34 elements)");
  }
  // The header's count is not trusted with an allocation: grow with the data actually there,
  // so a corrupt count costs an error, not gigabytes.
  constexpr std::size_t kChunk = std::size_t{1} << 16;  // then doubling: <= 2x the real data
  while (a.data.size() < total) {
    const std::size_t have = a.data.size();
    const std::size_t want = static_cast<std::size_t>(std::min<uint64_t>(total - have, std::max(kChunk, have)));
    a.data.resize(have + want);
    const std::size_t got = in.read(a.data.data() + have, want);
    if (got != want) {
      throw IdxError(path, "truncated: expected " + std::to_string(total) + " data bytes, got " +
                               std::to_string(have + got));
    }
  }
  uint8_t extra;
  if (in.read(&extra, 1) != 0) throw IdxError(path, "trailing bytes after the IDX data");
  return a;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw IdxError(path, "file not found (install Debian's dataset-fashion-mnist, or pass --data-dir)");
  if (std::filesystem::is_directory(path, ec)) throw IdxError(path, "is a directory, not an IDX file");
  FileInput raw(path);
  IdxStream in(raw, path);
  return parse_stream(in, expected_rank, path);
}

IdxArray parse_idx(const uint8_t* data, std::size_t size, int expected_rank, const std::string& name) {
  MemoryInput raw(data, size);
  IdxStream in(raw, name);
  return parse_stream(in, expected_rank, name);
}

void check_idx_split(const IdxArray& images, const std::string& images_path, const IdxArray& labels,
                     const std::string& labels_path) {
  if (images.dims.size() != 3) throw IdxError(images_path, "images must have 3 dims [N, H, W]");
  if (labels.dims.size() != 1) throw IdxError(labels_path, "labels must have 1 dim [N]");
  // The sizes must match the dims: load_fashion_mnist wraps the bytes with torch::from_blob.
  uint64_t pixels = 1;
  for (const int64_t d : images.dims)
    if (d < 1 || __builtin_mul_overflow(pixels, static_cast<uint64_t>(d), &pixels))
      throw IdxError(images_path, "image dims must be positive and their product fit 64 bits");
  if (images.data.size() != pixels) throw IdxError(images_path, "image data size does not match its dims");
  if (labels.data.size() != static_cast<uint64_t>(labels.dims[0]))
    throw IdxError(labels_path, "label data size does not match its dims");
  if (images.dims[0] != labels.dims[0])
    throw IdxError(labels_path, "label count " + std::to_string(labels.dims[0]) + " != image count " +
                                    std::to_string(images.dims[0]) + " in " + images_path);
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] > 9)
      throw IdxError(labels_path, "label " + std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                                      " is outside [0, 10)");
}

}  // namespace jacond::models
