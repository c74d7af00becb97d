#include "models/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "models/init.h"  // layer_seed: the same splitmix mixing for (seed, epoch)

namespace jacond::models {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const {
    if (f) gzclose(f);
  }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes; returns the count read (short at end of file). Throws on zlib errors.
size_t gz_read_exact(gzFile f, const std::string& path, uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw IdxError(path, std::string("gzip error: ") + (msg ? msg : "unknown"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  if (!std::filesystem::exists(path))
    throw IdxError(path, "file not found (install Debian's dataset-fashion-mnist, or pass --data-dir)");
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw IdxError(path, "cannot open");

  uint8_t head[4];
  if (gz_read_exact(f.get(), path, head, 4) != 4) throw IdxError(path, "truncated: no IDX magic");
  const uint32_t magic = big_endian_u32(head);
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(expected_rank);
  if (magic != expected)
    throw IdxError(path, "bad IDX magic " + hex(magic) + ", expected " + hex(expected) +
                             " (u8 data, " + std::to_string(expected_rank) + " dims)");

  IdxArray a;
  size_t total = 1;
  for (int k = 0; k < expected_rank; ++k) {
    if (gz_read_exact(f.get(), path, head, 4) != 4) throw IdxError(path, "truncated IDX header");
    const uint32_t dim = big_endian_u32(head);
    if (dim == 0) throw IdxError(path, "IDX dimension " + std::to_string(k) + " is zero");
    a.dims.push_back(dim);
    total *= dim;
    if (total > (size_t(1) << 34)) throw IdxError(path, "IDX dimensions too large");
  }
  a.data.resize(total);
  const size_t got = gz_read_exact(f.get(), path, a.data.data(), total);
  if (got != total)
    throw IdxError(path, "truncated: expected " + std::to_string(total) + " data bytes, got " + std::to_string(got));
  uint8_t extra;
  if (gz_read_exact(f.get(), path, &extra, 1) != 0) throw IdxError(path, "trailing bytes after the IDX data");
  return a;
}

FashionMnistSplit load_fashion_mnist(const std::string& dir, const std::string& split, int64_t limit) {
  std::string stem;
  if (split == "train") stem = "train";
  else if (split == "test") stem = "t10k";
  else throw std::invalid_argument("Fashion-MNIST split must be train or test, got '" + split + "'");
  if (limit < 0) throw std::invalid_argument("--data-limit must be >= 0");

  const std::string images_path = dir + "/" + stem + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + stem + "-labels-idx1-ubyte.gz";
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0])
    throw IdxError(labels_path, "label count " + std::to_string(labels.dims[0]) + " != image count " +
                                    std::to_string(images.dims[0]) + " in " + images_path);
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] > 9) throw IdxError(labels_path, "label " + std::to_string(labels.data[i]) + " at index " +
                                                            std::to_string(i) + " is outside [0, 10)");

  int64_t N = images.dims[0];
  if (limit > 0) N = std::min(N, limit);
  const int64_t H = images.dims[1], W = images.dims[2];
  FashionMnistSplit s;
  s.images = torch::from_blob(images.data.data(), {images.dims[0], 1, H, W}, torch::kUInt8)
                 .narrow(0, 0, N)
                 .clone();
  s.labels = torch::from_blob(labels.data.data(), {labels.dims[0]}, torch::kUInt8)
                 .narrow(0, 0, N)
                 .to(torch::kLong);
  return s;
}

torch::Tensor normalize_images(const torch::Tensor& images_u8) {
  return (images_u8.to(torch::kFloat32) / 255.0 - kFashionMnistMean) / kFashionMnistStd;
}

torch::Tensor augment(const torch::Tensor& images, int64_t pad, bool flip, std::mt19937_64& gen) {
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3);
  const double black = (0.0 - kFashionMnistMean) / kFashionMnistStd;
  torch::Tensor padded = images;
  if (pad > 0) padded = torch::constant_pad_nd(images, {pad, pad, pad, pad}, black);
  torch::Tensor out = torch::empty_like(images);
  std::uniform_int_distribution<int64_t> shift(0, 2 * pad);
  std::bernoulli_distribution coin(0.5);
  for (int64_t b = 0; b < B; ++b) {
    // Draw order per image: row shift, column shift, flip (fixed: part of the resume contract).
    const int64_t dy = pad > 0 ? shift(gen) : 0;
    const int64_t dx = pad > 0 ? shift(gen) : 0;
    const bool f = flip && coin(gen);
    torch::Tensor img = padded[b].narrow(1, dy, H).narrow(2, dx, W);
    out[b] = f ? img.flip({2}) : img;
  }
  return out;
}

std::vector<int64_t> epoch_permutation(int64_t N, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) p[i] = i;
  std::mt19937_64 gen(layer_seed(seed ^ 0x5eedda7aULL, epoch));
  for (int64_t i = N - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(p[i], p[pick(gen)]);
  }
  return p;
}

}  // namespace jacond::models
