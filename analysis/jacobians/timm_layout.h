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
/// logit_scale 0 means 1/sqrt(d_h). Throws std::invalid_argument, one line naming the key, for a
/// missing key, a wrong shape ("expected [..], got [..]"), d not divisible by heads, NaN or inf.
/// Ends with w.validate().
BlockWeights block_from_timm_layout(const TimmLookup& lookup, Index layer, Index heads, double logit_scale = 0.0,
                                    double ln_eps = 1e-6);

/// `w` (after w.validate()) as the timm-named arrays of block `layer`, in the order listed above.
std::vector<std::pair<std::string, TimmArray>> block_to_timm_layout(const BlockWeights& w, Index layer);

}  // namespace jacond
