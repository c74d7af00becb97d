// timm's parameter layout of one ViT block <-> the analysis weights jacond::BlockWeights (paper
// row-vector convention, y = x W + b). docs/design.md §2: this file is the ONLY place where the
// Linear transpose (timm/PyTorch store weight = Wᵀ, out×in) happens; LibTorch tensors
// (models/track/bridge.h) and NumPy arrays (the Python module, python/) both come through here.
//
//   blocks.{l}.norm1.weight, .bias    [d]       γ, β of LN1
//   blocks.{l}.attn.qkv.weight        [3d, d]   rows [0,d) = (W^Q)ᵀ, [d,2d) = (W^K)ᵀ, [2d,3d) = (W^V)ᵀ
//   blocks.{l}.attn.qkv.bias          [3d]      b_Q | b_K | b_V
//   blocks.{l}.attn.proj.weight, .bias [d, d], [d]           (W^O)ᵀ, b_O
//   blocks.{l}.norm2.weight, .bias    [d]       γ, β of LN2
//   blocks.{l}.mlp.fc1.weight, .bias  [hidden, d], [hidden]  W_1ᵀ, b_1
//   blocks.{l}.mlp.fc2.weight, .bias  [d, hidden], [d]       W_2ᵀ, b_2
// A Linear's .bias may be absent: the layer then has none (timm's qkv_bias=False, bias=False), read
// as zeros, the same function. The weights and the norms' biases are required (a norm without a
// bias may be an RMSNorm, another function, which the same keys cannot tell from LayerNorm).
// And, when present, a scale on each residual branch:
//   blocks.{l}.ls1.gamma, .ls2.gamma  [d]       timm's LayerScale (init_values: DeiT III, DINOv2, CaiT)
//   blocks.{l}.rezero_attn, .rezero_mlp [1]     jacond's ReZero α₁, α₂ (models/vit/vit.h)
// A branch scale g (per feature, or one α) is folded into the branch's last Linear,
//   x + g ∘ (h W + b) = x + h (W diag g) + g ∘ b,
// so the block reads as the paper's block with W^O, b_O (ls1, α₁) or W_2, b_2 (ls2, α₂) scaled.
// Any other key under blocks.{l}. (timm's attn.q_norm, ...) is a block the paper's equations do not
// describe: require_known_block_keys refuses it rather than analysing another function.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analysis/jacobians/block.h"

namespace jacond {

/// One named array in fp64: `shape` as stored (1-D [r] or 2-D [r, c]) and its entries as an
/// r × c matrix (entry (i, j) = t[i][j]; a 1-D array is an r × 1 column).
struct TimmArray {
  std::vector<Index> shape;
  Mat values;
};

/// The array stored under a key, or nullopt when there is none. A lookup may throw
/// std::invalid_argument naming the key for what it alone can judge (e.g. an integer dtype).
using TimmLookup = std::function<std::optional<TimmArray>(const std::string& key)>;

/// Reads block `layer` ("blocks.{layer}.…"): d from norm1.weight, hidden from mlp.fc1.weight;
/// logit_scale 0 means 1/sqrt(d_h). Branch scales are folded in (the block's function, for its
/// Jacobians) unless fold_branch_scales is false (the stored weights themselves, for the
/// data-free weight reports). Throws std::invalid_argument, one line naming the key, for a
/// missing weight or norm bias, a wrong shape ("expected [..], got [..]"), d not divisible by heads, NaN or inf.
/// Ends with w.validate().
BlockWeights block_from_timm_layout(const TimmLookup& lookup, Index layer, Index heads, double logit_scale = 0.0,
                                    double ln_eps = 1e-6, bool fold_branch_scales = true);

/// Throws std::invalid_argument naming the first of `keys` under "blocks.{layer}." that is not in
/// the layout above (a parameter the analysed block does not have, e.g. attn.q_norm.weight).
void require_known_block_keys(const std::vector<std::string>& keys, Index layer);

/// `w` (after w.validate()) as the timm-named arrays of block `layer`, in the order listed above
/// (branch scales, if the block had any, are already inside W^O, b_O, W_2, b_2).
std::vector<std::pair<std::string, TimmArray>> block_to_timm_layout(const BlockWeights& w, Index layer);

}  // namespace jacond
