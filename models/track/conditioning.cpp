#include "models/track/conditioning.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/report/report_csv.h"
#include "analysis/report/weight_report.h"
#include "models/track/bridge.h"

namespace jacond::models {

namespace {

// The data-free matrices (see the header), after the block matrices of analysis/report/block_report.h.
const std::vector<std::string>& known_matrices() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = jacond::block_matrix_names();
    for (const auto& m : jacond::weight_matrix_names()) all.push_back(m);
    return all;
  }();
  return names;
}

bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

// Runs `forward` without gradients in eval mode (BatchNorm's running statistics, no drop path),
// then puts the model back in training mode if it was there, also when `forward` throws: the
// trainer catches a tracking failure (a CUDA OOM, retried on the host) and trains on, which it
// did in eval mode (no drop path) when the mode was restored on the normal return alone.
template <typename Forward>
void in_eval_mode(torch::nn::Module& model, Forward&& forward) {
  torch::NoGradGuard no_grad;
  struct RestoreMode {
    torch::nn::Module& model;
    const bool was_training;
    ~RestoreMode() {
      if (was_training) model.train();
    }
  } restore{model, model.is_training()};
  model.eval();
  forward();
}

}  // namespace

std::vector<std::string> parse_matrix_list(const std::string& spec) {
  return jacond::parse_matrix_names(spec, known_matrices());
}

void check_matrices_for(NormPlacement norm, const std::vector<std::string>& matrices) {
  if (norm == NormPlacement::kPre) return;
  const std::vector<std::string>& post = jacond::post_norm_matrix_names();
  const std::vector<std::string>& weights = jacond::weight_matrix_names();
  for (const auto& m : matrices)
    if (std::find(post.begin(), post.end(), m) == post.end() && std::find(weights.begin(), weights.end(), m) == weights.end())
      throw std::invalid_argument("a post-norm model has no LayerNorm before its branches: its blocks report K_sa, B_sa, "
                                  "E_sa, softmax and attention (and the data-free matrices), not " + m);
}

std::vector<LayerReport> state_conditioning(const TensorMap& state, const ViTConfig& cfg,
                                            const torch::Tensor& probe_images, const TrackOptions& options) {
  VisionTransformer model(cfg);
  model->load_state(state);
  return track_conditioning(model, probe_images, options);
}

namespace {

// The weights-only reports of layer l among `names` (empty: all), from the stored weights (no
// ReZero α or LayerScale γ folded in), probe -1.
void append_weight_reports(const TensorMap& state, const ViTConfig& cfg, int64_t l, const std::vector<std::string>& names,
                           std::vector<LayerReport>& out) {
  for (auto& r : jacond::weight_reports(block_from_timm(state, l, cfg.heads, 0.0, cfg.ln_eps, false)))
    if (wanted(names, r.matrix)) out.push_back({-1, l, std::move(r)});
}

}  // namespace

std::vector<LayerReport> track_conditioning(VisionTransformer& model, const torch::Tensor& probe_images,
                                            const TrackOptions& options) {
  check_matrices_for(model->config().norm, options.matrices);
  // Only the wanted block matrices are built and solved. The data-free names (W_VO, ...) are
  // reported per layer, from the weights alone, when named: "all" means the block matrices, as
  // in `jacond audit` with data.
  TrackOptions selected = options;
  std::vector<std::string> weight_names;
  if (!options.matrices.empty()) {
    selected.block.matrices.clear();
    for (const auto& name : jacond::block_matrix_names())
      if (wanted(options.matrices, name)) selected.block.matrices.push_back(name);
    for (const auto& name : jacond::weight_matrix_names())
      if (wanted(options.matrices, name)) weight_names.push_back(name);
  }
  const ViTConfig& cfg = model->config();
  const TensorMap state = model->state();
  const bool block_rows = options.matrices.empty() || !selected.block.matrices.empty();
  std::vector<torch::Tensor> inputs;
  if (block_rows) in_eval_mode(*model, [&] { model->forward_with_block_inputs(probe_images, inputs); });
  // Layer by layer, its weight rows (probe -1) before its probes' rows: the order of the rows
  // gathered from ranks that split the layers (sorted by layer, then probe).
  std::vector<LayerReport> out;
  for (int64_t l = options.layer_offset; l < cfg.depth; l += options.layer_stride) {
    if (!weight_names.empty()) append_weight_reports(state, cfg, l, weight_names, out);
    if (!block_rows) continue;
    jacond::SkipMode mode;
    const jacond::BlockWeights w = analysis_block(state, cfg, l, &mode);
    for (int64_t m = 0; m < probe_images.size(0); ++m) {
      const jacond::Mat X = to_eigen(inputs[l][m]);  // n×d tokens entering block l
      TrackOptions o = selected;
      if (options.warm) o.block.warm = &(*options.warm)[{l, m}];
      std::vector<jacond::ConditionReport> reports =
          cfg.norm == NormPlacement::kPre ? jacond::block_reports(w, X, mode, o.block) : jacond::post_norm_block_reports(w, X, o.block);
      for (auto& r : reports) out.push_back({m, l, std::move(r)});
    }
  }
  return out;
}

const std::vector<std::string>& convmixer_matrix_names() {
  static const std::vector<std::string> names = {"X_in", "mix_out", "mix_block_out", "block_out"};
  return names;
}

std::vector<LayerReport> convmixer_conditioning(ConvMixer& model, const torch::Tensor& probe_images,
                                                const std::vector<std::string>& matrices) {
  std::vector<ConvMixerImpl::BlockFeatures> features;
  in_eval_mode(*model, [&] { model->forward_with_features(probe_images, features); });
  const std::vector<std::string>& names = convmixer_matrix_names();
  std::vector<LayerReport> out;
  for (int64_t l = 0; l < static_cast<int64_t>(features.size()); ++l) {
    const auto& f = features[l];
    const torch::Tensor* tensors[] = {&f.input, &f.mix, &f.mix_with_skip, &f.output};  // in the order of `names`
    for (int64_t m = 0; m < probe_images.size(0); ++m)
      for (size_t k = 0; k < names.size(); ++k)
        if (wanted(matrices, names[k]))
          out.push_back({m, l, jacond::condition_svd(to_eigen((*tensors[k])[m]), names[k])});
  }
  return out;
}

std::vector<LayerReport> data_free_conditioning(const TensorMap& state, const ViTConfig& cfg) {
  check_blocks_match(state, cfg);  // the data route's load_state refuses a mismatch; this reads blocks alone
  std::vector<LayerReport> out;
  for (int64_t l = 0; l < cfg.depth; ++l) append_weight_reports(state, cfg, l, {}, out);
  return out;
}

std::string conditioning_csv_header() { return "step,probe,layer," + jacond::report_csv_header(); }

std::string conditioning_csv_row(int64_t step, const LayerReport& r) {
  return std::to_string(step) + "," + (r.probe < 0 ? std::string("none") : std::to_string(r.probe)) + "," +
         std::to_string(r.layer) + "," + jacond::report_csv_fields(r.report);
}

}  // namespace jacond::models
