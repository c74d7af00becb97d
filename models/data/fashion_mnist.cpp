#include "models/data/fashion_mnist.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "models/init/init.h"  // layer_seed: the same splitmix mixing for (seed, epoch)

namespace jacond::models {

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
  check_idx_split(images, images_path, labels, labels_path);  // counts, sizes, label range

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
