// ConvMixer (Trockman & Kolter, "Patches Are All You Need?", TMLR 2023), the CNN control of
// "Always Skip Attention" §5: the paper removes its skip connections and reports accuracy moving
// by less than ±0.2 %, against −22 % for a ViT without its attention skip. The same patch tokens
// as the ViT, mixed by convolutions instead of attention:
//
//   stem     X₀ = BN(GELU(Conv_{p×p, stride p}(image)))                   [B, h, H/p, W/p]
//   block ℓ  spatial mixing   M = BN(GELU(DepthwiseConv_{k×k, same}(X)))   (per channel, over pixels)
//            with its skip    X₁ = X + M      (skip "full"; skip "none": X₁ = M)
//            channel mixing   X ← BN(GELU(Conv_{1×1}(X₁)))                  (per pixel, over channels)
//   head     logits = Linear(mean over pixels of X)
//
// The paper's ConvMixer has one residual per block, around the spatial mixing (the counterpart of
// the attention block's skip); "none" removes it. Parameters are PyTorch's defaults (kaiming-
// uniform convolutions and linear layer, BatchNorm 1/0), drawn from the config's seed.
//
// Names (state(), checkpoints): stem_conv.*, stem_norm.*, blocks.{l}.spatial.*, blocks.{l}.spatial_norm.*,
// blocks.{l}.channel.*, blocks.{l}.channel_norm.*, head.* (BatchNorm's running statistics included).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/classifier/classifier.h"

namespace jacond::models {

struct ConvMixerConfig {
  int64_t image_size = 28, in_chans = 1, num_classes = 10;
  int64_t dim = 64, depth = 4, patch = 2, kernel = 5;
  bool skip = true;  // the residual around each block's spatial mixing
  uint64_t seed = 0;

  /// Throws std::invalid_argument naming the first bad field.
  void validate() const;
  nlohmann::json to_json() const;  // {"arch": "convmixer", ...}
};

class ConvMixerBlockImpl : public torch::nn::Module {
 public:
  ConvMixerBlockImpl(int64_t dim, int64_t kernel);
  torch::nn::Conv2d spatial{nullptr}, channel{nullptr};
  torch::nn::BatchNorm2d spatial_norm{nullptr}, channel_norm{nullptr};
};
TORCH_MODULE(ConvMixerBlock);

class ConvMixerImpl : public ClassifierImpl {
 public:
  explicit ConvMixerImpl(const ConvMixerConfig& cfg);
  torch::Tensor forward(const torch::Tensor& images) override;
  /// The logits, and per block the token matrices [B, n, h] (n = pixels of the grid, detached):
  /// its input X, the spatial mixing M, X + M (whether or not the block adds it), and its output.
  struct BlockFeatures {
    torch::Tensor input, mix, mix_with_skip, output;
  };
  torch::Tensor forward_with_features(const torch::Tensor& images, std::vector<BlockFeatures>& features);
  TensorMap state() const override;
  void load_state(const TensorMap& tensors) override;
  const ConvMixerConfig& config() const { return cfg_; }

 private:
  torch::Tensor run(const torch::Tensor& images, std::vector<BlockFeatures>* features);
  ConvMixerConfig cfg_;
  torch::nn::Conv2d stem_conv{nullptr};
  torch::nn::BatchNorm2d stem_norm{nullptr};
  std::vector<ConvMixerBlock> blocks;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ConvMixer);

}  // namespace jacond::models
