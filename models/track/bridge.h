// The bridge between LibTorch tensors (timm names, Linear weight = Wᵀ, out×in) and the analysis
// weights jacond::BlockWeights (paper row-vector convention, y = x W + b): tensors become fp64
// arrays here, and the timm layout with its Linear transpose is analysis/jacobians/timm_layout.h
// (docs/design.md §2), shared with the Python module.
#pragma once

#include <cstdint>

#include "analysis/jacobians/block.h"
#include "analysis/core/types.h"
#include "models/io/tensor_map.h"
#include "models/vit/vit.h"

namespace jacond::models {

/// A 2-D tensor [r, c] as an r×c fp64 matrix (entry (i, j) = t[i][j]); a 1-D tensor [r] as an
/// r×1 column. Any floating dtype and any device/strides; throws std::invalid_argument otherwise.
jacond::Mat to_eigen(const at::Tensor& t);
/// A 1-D tensor (or 2-D with one column/row) as an fp64 vector.
jacond::Vec to_eigen_vec(const at::Tensor& t);

/// An r×c matrix as a contiguous fp64 CPU tensor [r, c] (entry [i][j] = m(i, j)).
at::Tensor to_torch(const jacond::Mat& m);
/// A vector as a contiguous fp64 CPU tensor [r].
at::Tensor to_torch_vec(const jacond::Vec& v);

/// Reads block `layer` ("blocks.{layer}.…") into analysis weights. d is inferred from
/// norm1.weight, hidden from mlp.fc1.weight. logit_scale 0 means 1/sqrt(d_h) (docs/design.md §2).
/// Branch scales (LayerScale ls1/ls2.gamma, ReZero's rezero_attn/mlp) are folded in, and a key
/// under blocks.{layer}. that the layout does not know is refused (timm_layout.h).
/// Throws std::invalid_argument, one line naming the key, for: a missing key, a wrong shape
/// (expected vs got), d not divisible by heads, NaN/inf values. Ends with w.validate().
jacond::BlockWeights block_from_timm(const TensorMap& tensors, int64_t layer, int64_t heads,
                                     double logit_scale = 0.0, double ln_eps = 1e-6, bool fold_branch_scales = true);

/// Writes `w` (after w.validate()) as fp64 timm-named tensors of block `layer` into `out`.
void block_to_timm(const jacond::BlockWeights& w, int64_t layer, TensorMap& out);

/// Analysis weights of block `layer` of a model state (fp64, paper convention) with ReZero's α₁,
/// α₂ folded into W^O, b_O and W_2, b_2 by block_from_timm: x + α·(h W + b) = x + h(αW) + αb, so
/// the block is an ordinary full-residual block for analysis. `analysis_skip` receives analysis_skip_mode(cfg.skip).
jacond::BlockWeights analysis_block(const TensorMap& state, const ViTConfig& cfg, int64_t layer,
                                    jacond::SkipMode* analysis_skip = nullptr);

}  // namespace jacond::models
