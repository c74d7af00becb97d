// Fashion-MNIST from Debian's `dataset-fashion-mnist` (IDX files, gzip-compressed).
//
// IDX files (gzip or plain) are decoded by models/data/idx.h, which also holds IdxError,
// IdxArray and read_idx.
//
// Normalisation: x = (pixel/255 − mean)/std with the training-split statistics
// mean 0.2860, std 0.3530 (computed from train-images-idx3-ubyte: 0.28604, 0.35302).
// Augmentation (training only, optional): random crop with zero padding `pad` pixels and
// horizontal flip with probability 1/2, both drawn from the caller's generator, so a run is a
// function of (seed, step) and a resumed run repeats them exactly.
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/data/idx.h"

namespace jacond::models {

/// Default location of the Debian package's files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

/// One split in memory: images [N, 1, H, W] u8, labels [N] int64 in [0, 10).
struct FashionMnistSplit {
  torch::Tensor images;  // kByte
  torch::Tensor labels;  // kLong
  int64_t size() const { return labels.size(0); }
};

/// Loads "train" or "test" (t10k) from `dir`. `limit` > 0 keeps the first `limit` examples.
/// Throws IdxError naming the file for a missing/malformed file, and for an image/label count
/// mismatch or a label outside [0, 10).
FashionMnistSplit load_fashion_mnist(const std::string& dir, const std::string& split, int64_t limit = 0);

/// u8 images [B, 1, H, W] -> normalised float32 (x/255 − mean)/std.
torch::Tensor normalize_images(const torch::Tensor& images_u8);

/// Random crop (zero padding `pad`) and horizontal flip, per image, from `gen`. Input and output
/// are normalised float [B, 1, H, W]; padding uses the normalised value of a black pixel.
torch::Tensor augment(const torch::Tensor& images, int64_t pad, bool flip, std::mt19937_64& gen);

/// The permutation of [0, N) for epoch `epoch` of a run with seed `seed` (Fisher–Yates on a
/// std::mt19937_64 seeded from (seed, epoch)): a pure function, so any epoch can be recreated.
std::vector<int64_t> epoch_permutation(int64_t N, uint64_t seed, int64_t epoch);

}  // namespace jacond::models
