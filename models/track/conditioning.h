// Conditioning of a LibTorch ViT, layer by layer: the bridge from a model (or a checkpoint) to
// the analysis reports of analysis/report/block_report.h.
//
// With data: the probe images go through the model's real forward pass (eval mode); the tokens
// entering block ℓ, X_ℓ ∈ R^{n×d} for each probe image, and block ℓ's weights (fp32 → fp64
// through models/track/bridge.h) give the reports of `jacond block`: K_sa, B_sa, E_sa, K_sab, K_mlp,
// K_ffn (and their LayerNorm-complement restrictions when the sub-block has no residual), the
// softmax Jacobian and attention map per head. ReZero blocks are analysed as full-residual blocks
// with α folded into W^O, b_O, W_2, b_2 (models/track/bridge.h: analysis_block). Post-norm blocks have
// no LayerNorm before the branches, so only the attention-level matrices at the attention's
// input X_ℓ are reported (K_sa, B_sa, E_sa, softmax and attention per head); asking for another
// is an error (check_matrices_for).
//
// Data-free (weights only), per layer: analysis/report/weight_report.h (W_VO, W_VO_h, W_QK_h and
// each weight matrix).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "analysis/report/block_report.h"
#include "analysis/spectral/condition.h"
#include "models/classifier/convmixer.h"
#include "models/vit/vit.h"

namespace jacond::models {

struct LayerReport {
  int64_t probe = -1;  // probe image index; -1 for data-free reports
  int64_t layer = 0;
  jacond::ConditionReport report;
};

struct TrackOptions {
  jacond::BlockReportOptions block;  // route (method), per-head and sub-block switches
  /// Keep only these matrix names (empty: all the block matrices). Matching is on
  /// ConditionReport::matrix. A data-free name (W_VO, ...) adds that layer's row from its weights
  /// (probe -1), before the layer's probe rows.
  std::vector<std::string> matrices;
  /// Lanczos warm starts per (layer, probe), carried across calls (training steps, checkpoints
  /// in step order) when set; block.warm is ignored then.
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, jacond::GklWarmStart>>* warm = nullptr;
  /// Only the layers l with l % layer_stride == layer_offset (data-parallel tracking split by
  /// layer across the ranks: offset = rank, stride = number of ranks).
  int64_t layer_offset = 0, layer_stride = 1;
};

/// Where tracking's analysis runs: BlockReportOptions' `device` (the dense routes) and
/// `operator_device` (the lanczos route's products), analysis/report/block_report.h; null: the
/// host. The caller chooses them: `jacond train --device cuda` passes the GPU's
/// (experiments/cli/device_option.h: select_track_devices), since the CUDA dense back end is a
/// module the executable finds beside itself, which models/ does not know. Only some rows use
/// them (TrainConfig::device_tracked_matrices); those say so in their `method` (gkl-cuda,
/// dense-lu-lanczos-cuda, ...). A row may also take another route than on the host, with another
/// status: auto's fit check reads the device's free memory, in which LibTorch's cache of training
/// tensors counts as used.
struct TrackDevices {
  std::shared_ptr<const DenseDevice> dense;
  std::shared_ptr<const OperatorDevice> products;
  bool any() const { return dense || products; }
};

/// Refuses (std::invalid_argument naming it) a matrix name a model of this norm placement does not
/// report: a post-norm block has K_sa, B_sa, E_sa, softmax and attention (post_norm_block_reports)
/// and the data-free matrices, nothing of LayerNorm-preceded sub-blocks (K_sab, K_ffn, LN1_out, ...).
/// track_conditioning calls it, so asking a post-norm model for K_ffn is an error, not an empty table.
void check_matrices_for(NormPlacement norm, const std::vector<std::string>& matrices);

/// Reports of every layer for every probe image ([m, C, H, W], already normalised).
std::vector<LayerReport> track_conditioning(VisionTransformer& model, const torch::Tensor& probe_images,
                                            const TrackOptions& options);

/// The same from a state (e.g. a checkpoint) without a live model.
std::vector<LayerReport> state_conditioning(const TensorMap& state, const ViTConfig& cfg,
                                            const torch::Tensor& probe_images, const TrackOptions& options);

/// The ConvMixer control ("Always Skip Attention" §5): κ of the n × h token matrices of each block
/// (n pixels of the grid), by the SVD, on the probe images: X_in (the block's input), mix_out (the
/// spatial mixing M), mix_block_out (X + M, whether or not the block adds it) and block_out (after
/// the channel mixing). `matrices` empty: all four.
const std::vector<std::string>& convmixer_matrix_names();
std::vector<LayerReport> convmixer_conditioning(ConvMixer& model, const torch::Tensor& probe_images,
                                                const std::vector<std::string>& matrices);

/// Weights-only reports of every layer (see the header comment).
std::vector<LayerReport> data_free_conditioning(const TensorMap& state, const ViTConfig& cfg);

/// Parses "K_sa,K_sab,softmax" into names, checking each is a known matrix; "" or "all" -> {}.
std::vector<std::string> parse_matrix_list(const std::string& spec);

/// CSV header/rows of conditioning.csv: step, probe, layer, then the report fields.
std::string conditioning_csv_header();
std::string conditioning_csv_row(int64_t step, const LayerReport& r);

}  // namespace jacond::models
