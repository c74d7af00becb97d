// A Vision Transformer in LibTorch (XxxImpl + TORCH_MODULE style) with timm parameter names, so a
// model saves to and loads from timm-named safetensors:
//
//   patch_embed.proj.weight [d, C, p, p], patch_embed.proj.bias [d]   (Conv2d, stride p)
//   cls_token [1, 1, d], pos_embed [1, 1 + (H/p)(W/p), d]
//   blocks.{l}.norm1.{weight,bias}, blocks.{l}.attn.qkv.{weight,bias} [3d, d] / [3d],
//   blocks.{l}.attn.proj.{weight,bias}, blocks.{l}.norm2.*, blocks.{l}.mlp.fc1.*, .mlp.fc2.*
//   blocks.{l}.rezero_attn, blocks.{l}.rezero_mlp [1]    (ReZero only; not a timm name)
//   norm.{weight,bias}, head.{weight,bias} [classes, d]
//
// Block (x: tokens [B, n, d]; a = attention branch Attn(·), m = MLP branch Mlp(·)):
//   pre-norm   full:   x ← x + a(LN1 x);            x ← x + m(LN2 x)
//              none:   x ← a(LN1 x);                x ← m(LN2 x)
//              sab:    x ← x + a(LN1 x);            x ← m(LN2 x)
//              ffn:    x ← a(LN1 x);                x ← x + m(LN2 x)
//              rezero: x ← x + α₁ a(LN1 x);         x ← x + α₂ m(LN2 x),   α₁ = α₂ = 0 at init
//   post-norm  the same with LN applied after the (residual) sum: x ← LN1(x + a(x)), etc.
// Attention is the paper's Eq. 3–4 (analysis/jacobians/block.h): A_h = softmax(s·Q_h K_hᵀ), s = 1/sqrt(d_h).
// GELU is exact, LayerNorm eps 1e-6 (timm). Drop path (stochastic depth) applies to residual
// branches only and is off for skipless sub-blocks.
//
// Initialisation: blocks by models/init/init.h (`timm`, `ours` (α, β, c), `mimetic`; MLP timm or DKS);
// the rest as timm's ViT: Linear (head) trunc_normal(0.02) with zero bias, pos_embed
// trunc_normal(0.02), cls_token N(0, 1e-6²), patch conv PyTorch's default (kaiming_uniform a=√5,
// bias U(±1/√fan_in)), LayerNorms 1/0. All draws come from generators seeded by the config seed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "analysis/jacobians/block.h"
#include "models/classifier/classifier.h"
#include "models/init/init.h"
#include "models/io/tensor_map.h"

namespace jacond::models {

/// The model's skip modes: the analysis's four (jacond::SkipMode, analysis/jacobians/block.h,
/// spelled the same) plus ReZero, a full residual whose branches are scaled by learned α₁, α₂.
enum class SkipKind { kNone, kFull, kSab, kFfn, kRezero };
inline constexpr SkipKind kSkipKinds[] = {SkipKind::kNone, SkipKind::kFull, SkipKind::kSab, SkipKind::kFfn,
                                          SkipKind::kRezero};
/// "none" | "full" | "no-ffn-skip" | "no-sab-skip" (to_string of the SkipMode; the earlier "sab" and
/// "ffn" are still read) | "rezero". Throws std::invalid_argument listing them.
SkipKind parse_skip_kind(const std::string& s);
std::string to_string(SkipKind s);
/// The one mapping to the analysis: each kind is analysed as the SkipMode of the same name, and
/// ReZero as `full` (its α₁, α₂ folded into the weights by analysis_block, models/track/bridge.h). The block's forward
/// takes its residuals from this too (sab_residual / ffn_residual of the result).
jacond::SkipMode analysis_skip_mode(SkipKind s);

enum class NormPlacement { kPre, kPost };
NormPlacement parse_norm_placement(const std::string& s);  // pre | post
std::string to_string(NormPlacement p);

struct ViTConfig {
  int64_t image_size = 28, in_chans = 1, patch = 4, num_classes = 10;
  int64_t dim = 192, depth = 6, heads = 3;
  double mlp_ratio = 4.0;
  SkipKind skip = SkipKind::kFull;
  NormPlacement norm = NormPlacement::kPre;
  double ln_eps = 1e-6;
  double drop_path = 0.0;  // maximum rate (linear in depth, as timm), residual branches only
  InitConfig init;

  int64_t hidden() const;
  int64_t grid() const { return image_size / patch; }
  int64_t tokens() const { return grid() * grid() + 1; }
  /// Throws std::invalid_argument naming the first bad field.
  void validate() const;
  nlohmann::json to_json() const;
  /// Inverse of to_json; missing keys keep their defaults, wrong types throw one line.
  static ViTConfig from_json(const nlohmann::json& j);
  /// from_json without validate(): the fields of a TrainConfig, whose finalize() checks what its
  /// architecture uses (a ConvMixer's ViT fields, e.g. a head count that does not divide d, are unused).
  static ViTConfig fields_from_json(const nlohmann::json& j);
  /// The config a checkpoint jacond wrote keeps in its safetensors "config" metadata, or nullopt
  /// when `metadata` has none (a foreign file). Throws std::runtime_error "FILE: malformed 'config'
  /// metadata: ..." when it does not parse.
  static std::optional<ViTConfig> from_metadata(const std::map<std::string, std::string>& metadata,
                                                const std::string& file);
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads);
  /// x [B, n, d] -> [B, n, d]. When `maps` is given, the attention maps [B, h, n, n] go there.
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* maps = nullptr);
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  int64_t heads, head_dim;
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ViTConfig& cfg, double drop_path_rate);
  torch::Tensor forward(const torch::Tensor& x);
  /// Attention-branch and MLP-branch scalars: α₁, α₂ for ReZero, 1 otherwise.
  double attn_scale() const;
  double mlp_scale() const;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
  torch::Tensor rezero_attn, rezero_mlp;  // undefined unless skip == rezero

 private:
  torch::Tensor branch(const torch::Tensor& b, const torch::Tensor& scale, bool residual) const;
  SkipKind skip_;
  NormPlacement norm_;
  double drop_path_;
};
TORCH_MODULE(Block);

class PatchEmbedImpl : public torch::nn::Module {
 public:
  PatchEmbedImpl(int64_t in_chans, int64_t dim, int64_t patch);
  /// images [B, C, H, W] -> tokens [B, (H/p)(W/p), d], row-major over the patch grid.
  torch::Tensor forward(const torch::Tensor& images);
  torch::nn::Conv2d proj{nullptr};
};
TORCH_MODULE(PatchEmbed);

class VisionTransformerImpl : public ClassifierImpl {
 public:
  explicit VisionTransformerImpl(const ViTConfig& cfg);
  /// images [B, C, H, W] -> logits [B, classes].
  torch::Tensor forward(const torch::Tensor& images) override;
  /// Logits, and the tokens entering each block ([B, n, d] each, detached) in `block_inputs`.
  torch::Tensor forward_with_block_inputs(const torch::Tensor& images, std::vector<torch::Tensor>& block_inputs);
  /// Re-draws every parameter from cfg.init (and the timm rules above) in place.
  void reset_parameters();
  /// All parameters and buffers by timm name, as float32 CPU tensors sharing storage when possible.
  TensorMap state() const override;
  /// Copies `tensors` into the parameters (any float dtype). Every parameter must be present
  /// with its shape; unknown keys are an error. Throws one line naming the key.
  void load_state(const TensorMap& tensors) override;
  const ViTConfig& config() const { return cfg_; }

  PatchEmbed patch_embed{nullptr};
  torch::Tensor cls_token, pos_embed;
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  torch::Tensor embed(const torch::Tensor& images);
  ViTConfig cfg_;
};
TORCH_MODULE(VisionTransformer);

/// The config of a timm-named state: dim, depth, patch, in_chans, image size, classes and
/// mlp_ratio inferred from the shapes; heads, skip, norm and eps taken from `base`. Throws one line
/// naming a missing or inconsistent key.
ViTConfig infer_config(const TensorMap& tensors, ViTConfig base);

/// The block fields of a timm-named state, for analyses that read the blocks alone (audit
/// --data-free): dim from blocks.0.norm1.weight, depth from the blocks.{i}. indices, mlp_ratio
/// from blocks.0.mlp.fc1.weight; heads, skip, norm and eps from `base`, and the embedding's fields
/// (image size, patch, channels, classes) left at base's, unread. A headless backbone
/// (num_classes=0) or one without a class token's position (DeiT III) has blocks like any other.
ViTConfig infer_block_config(const TensorMap& tensors, ViTConfig base);

/// Throws one line unless the state's blocks are exactly blocks.0 ... blocks.{cfg.depth - 1} and
/// blocks.0.norm1.weight has cfg.dim entries: a config that disagrees with its tensors would
/// analyse another model, and a gap in the indices would silently drop the blocks after it.
void check_blocks_match(const TensorMap& tensors, const ViTConfig& cfg);

/// A timm state of a model whose Linears (and patch embedding) have no biases (timm's
/// qkv_bias=False, bias=False) completed with those biases as zeros, shaped and typed as their
/// weights: the same function (analysis/jacobians/timm_layout.h reads an absent Linear bias so).
/// Norm biases are not filled (without one a norm may be an RMSNorm: load_state names it missing);
/// biases present are kept; a bias whose weight is absent is left for load_state to name.
void fill_absent_biases(TensorMap& tensors, const ViTConfig& cfg);


}  // namespace jacond::models
