#include "models/track/conditioning.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/report/report_csv.h"
#include "models/track/bridge.h"

namespace jacond::models {

namespace {

// The data-free matrices (see the header), after the block matrices of analysis/report/block_report.h.
const std::vector<std::string>& known_matrices() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = jacond::block_matrix_names();
    for (const char* m : {"W_VO", "W_VO_h", "W_QK_h", "W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"}) all.push_back(m);
    return all;
  }();
  return names;
}

bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

// Runs `forward` without gradients in eval mode (BatchNorm's running statistics, no drop path),
// then puts the model back in training mode if it was there.
template <typename Forward>
void in_eval_mode(torch::nn::Module& model, Forward&& forward) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  forward();
  if (was_training) model.train();
}

// Post-norm blocks: the attention sees X_ℓ itself; report the attention-level matrices there.
std::vector<jacond::ConditionReport> post_norm_reports(const jacond::BlockWeights& w, const jacond::Mat& X,
                                                       const TrackOptions& opt) {
  std::vector<jacond::ConditionReport> out;
  const jacond::AttentionCache c = jacond::attention_forward(w, X);
  const jacond::KappaRoute route = opt.block.route;
  const std::pair<const char*, jacond::AttentionPart> parts[] = {
      {"K_sa", jacond::AttentionPart::kFull}, {"B_sa", jacond::AttentionPart::kB}, {"E_sa", jacond::AttentionPart::kE}};
  for (const auto& [name, part] : parts)
    if (wanted(opt.matrices, name)) out.push_back(jacond::condition_dense(jacond::attention_jacobian(w, c, part), name, route, opt.block.device));
  if (wanted(opt.matrices, "attention"))
    for (jacond::Index h = 0; h < w.heads; ++h) {
      jacond::ConditionReport a = jacond::condition_svd(c.A[h], "attention");
      a.head = static_cast<int>(h);
      out.push_back(a);
    }
  return out;
}

}  // namespace

std::vector<std::string> parse_matrix_list(const std::string& spec) {
  return jacond::parse_matrix_names(spec, known_matrices());
}

std::vector<LayerReport> state_conditioning(const TensorMap& state, const ViTConfig& cfg,
                                            const torch::Tensor& probe_images, const TrackOptions& options) {
  VisionTransformer model(cfg);
  model->load_state(state);
  return track_conditioning(model, probe_images, options);
}

std::vector<LayerReport> track_conditioning(VisionTransformer& model, const torch::Tensor& probe_images,
                                            const TrackOptions& options) {
  // Only the wanted block matrices are built and solved; data-free names select none here.
  TrackOptions selected = options;
  if (!options.matrices.empty()) {
    selected.block.matrices.clear();
    for (const auto& name : jacond::block_matrix_names())
      if (wanted(options.matrices, name)) selected.block.matrices.push_back(name);
    if (selected.block.matrices.empty()) return {};
  }
  const ViTConfig& cfg = model->config();
  std::vector<torch::Tensor> inputs;
  in_eval_mode(*model, [&] { model->forward_with_block_inputs(probe_images, inputs); });
  const TensorMap state = model->state();
  std::vector<LayerReport> out;
  for (int64_t l = options.layer_offset; l < cfg.depth; l += options.layer_stride) {
    jacond::SkipMode mode;
    const jacond::BlockWeights w = analysis_block(state, cfg, l, &mode);
    for (int64_t m = 0; m < probe_images.size(0); ++m) {
      const jacond::Mat X = to_eigen(inputs[l][m]);  // n×d tokens entering block l
      TrackOptions o = selected;
      if (options.warm) o.block.warm = &(*options.warm)[{l, m}];
      std::vector<jacond::ConditionReport> reports =
          cfg.norm == NormPlacement::kPre ? jacond::block_reports(w, X, mode, o.block) : post_norm_reports(w, X, o);
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

namespace {

// κ over the range of a rank-r product: the r largest singular values.
jacond::ConditionReport range_report(const jacond::Mat& P, jacond::Index r, const std::string& name, int head) {
  const jacond::Vec sv = jacond::singular_values(P);
  jacond::ConditionReport rep = jacond::report_from_singular_values(name, P.rows(), P.cols(), sv.head(r), "dense-svd");
  rep.space = "rank-" + std::to_string(r);
  rep.head = head;
  return rep;
}

}  // namespace

std::vector<LayerReport> data_free_conditioning(const TensorMap& state, const ViTConfig& cfg) {
  std::vector<LayerReport> out;
  for (int64_t l = 0; l < cfg.depth; ++l) {
    const jacond::BlockWeights w = block_from_timm(state, l, cfg.heads, 0.0, cfg.ln_eps);  // raw weights (no ReZero α)
    const jacond::Index dh = w.head_dim();
    auto add = [&](jacond::ConditionReport r) { out.push_back({-1, l, std::move(r)}); };
    add(jacond::condition_svd(w.Wv * w.Wo, "W_VO"));
    for (jacond::Index h = 0; h < w.heads; ++h) {
      const auto cols = Eigen::seqN(h * dh, dh);
      add(range_report(w.Wv(Eigen::all, cols) * w.Wo(cols, Eigen::all), dh, "W_VO_h", static_cast<int>(h)));
      add(range_report(w.Wq(Eigen::all, cols) * w.Wk(Eigen::all, cols).transpose(), dh, "W_QK_h", static_cast<int>(h)));
    }
    add(jacond::condition_svd(w.Wq, "W_Q"));
    add(jacond::condition_svd(w.Wk, "W_K"));
    add(jacond::condition_svd(w.Wv, "W_V"));
    add(jacond::condition_svd(w.Wo, "W_O"));
    add(jacond::condition_svd(w.W1, "W_1"));
    add(jacond::condition_svd(w.W2, "W_2"));
  }
  return out;
}

std::string conditioning_csv_header() { return "step,probe,layer," + jacond::report_csv_header(); }

std::string conditioning_csv_row(int64_t step, const LayerReport& r) {
  return std::to_string(step) + "," + (r.probe < 0 ? std::string("none") : std::to_string(r.probe)) + "," +
         std::to_string(r.layer) + "," + jacond::report_csv_fields(r.report);
}

}  // namespace jacond::models
