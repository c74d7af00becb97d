#include "models/classifier/convmixer.h"

#include <stdexcept>
#include <string>

namespace jacond::models {

void ConvMixerConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("convmixer: " + what);
  };
  require(dim >= 1, "--dim must be >= 1, got " + std::to_string(dim));
  require(depth >= 1, "--depth must be >= 1, got " + std::to_string(depth));
  require(in_chans >= 1, "in_chans must be >= 1, got " + std::to_string(in_chans));
  require(num_classes >= 2, "num_classes must be >= 2, got " + std::to_string(num_classes));
  require(patch >= 1 && image_size % patch == 0, "--patch " + std::to_string(patch) + " must divide the image size " +
                                                    std::to_string(image_size));
  require(kernel >= 1 && kernel % 2 == 1, "--kernel must be odd and >= 1 (a 'same' padding), got " + std::to_string(kernel));
}

nlohmann::json ConvMixerConfig::to_json() const {
  return {{"arch", "convmixer"}, {"image_size", image_size}, {"in_chans", in_chans}, {"num_classes", num_classes},
          {"dim", dim}, {"depth", depth}, {"patch", patch}, {"kernel", kernel}, {"skip", skip ? "full" : "none"},
          {"seed", seed}};
}

namespace {

// [B, h, G, G] -> [B, G·G, h]: one row per pixel of the grid, as the ViT's tokens.
torch::Tensor tokens(const torch::Tensor& x) { return x.flatten(2).transpose(1, 2).detach(); }

}  // namespace

ConvMixerBlockImpl::ConvMixerBlockImpl(int64_t dim, int64_t kernel)
    : spatial(register_module("spatial", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, kernel)
                                                               .groups(dim).padding(kernel / 2)))),
      channel(register_module("channel", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 1)))),
      spatial_norm(register_module("spatial_norm", torch::nn::BatchNorm2d(dim))),
      channel_norm(register_module("channel_norm", torch::nn::BatchNorm2d(dim))) {}

ConvMixerImpl::ConvMixerImpl(const ConvMixerConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  torch::manual_seed(cfg_.seed);  // PyTorch's default inits draw from the global generator
  const int64_t h = cfg_.dim;
  stem_conv = register_module("stem_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(cfg_.in_chans, h, cfg_.patch)
                                                                 .stride(cfg_.patch)));
  stem_norm = register_module("stem_norm", torch::nn::BatchNorm2d(h));
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg_.depth; ++l) {
    blocks.emplace_back(h, cfg_.kernel);
    list->push_back(blocks.back());
  }
  head = register_module("head", torch::nn::Linear(h, cfg_.num_classes));
}

torch::Tensor ConvMixerImpl::run(const torch::Tensor& images, std::vector<BlockFeatures>* features) {
  torch::Tensor x = stem_norm(torch::gelu(stem_conv(images)));
  for (auto& block : blocks) {
    const torch::Tensor mix = block->spatial_norm(torch::gelu(block->spatial(x)));
    const torch::Tensor x1 = cfg_.skip ? x + mix : mix;
    const torch::Tensor out = block->channel_norm(torch::gelu(block->channel(x1)));
    if (features) features->push_back({tokens(x), tokens(mix), tokens(x + mix), tokens(out)});
    x = out;
  }
  return head(x.mean({2, 3}));
}

torch::Tensor ConvMixerImpl::forward(const torch::Tensor& images) { return run(images, nullptr); }

torch::Tensor ConvMixerImpl::forward_with_features(const torch::Tensor& images, std::vector<BlockFeatures>& features) {
  features.clear();
  return run(images, &features);
}

TensorMap ConvMixerImpl::state() const { return module_state(*this); }

void ConvMixerImpl::load_state(const TensorMap& tensors) { load_module_state(*this, tensors); }

}  // namespace jacond::models
