// LibTorch ↔ analysis weights: tensors to fp64 Eigen and back. The timm layout itself (and the
// Linear transpose) is analysis/jacobians/timm_layout.h's.
#include "models/track/bridge.h"

#include <torch/torch.h>

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/jacobians/timm_layout.h"

namespace jacond::models {
namespace {

using RowMajorMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << ']';
  return os.str();
}

}  // namespace

jacond::Mat to_eigen(const at::Tensor& t) {
  if (!t.defined()) throw std::invalid_argument("to_eigen: undefined tensor");
  if (!t.is_floating_point()) {
    std::ostringstream os;
    os << "to_eigen: expected a floating dtype, got " << t.scalar_type();
    throw std::invalid_argument(os.str());
  }
  if (t.dim() != 1 && t.dim() != 2) {
    throw std::invalid_argument("to_eigen: expected a 1-D or 2-D tensor, got shape " +
                                shape_str(t.sizes()));
  }
  // Contiguous torch storage is row-major: map it as such, then copy into column-major Mat.
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t rows = c.size(0), cols = c.dim() == 2 ? c.size(1) : 1;
  return Eigen::Map<const RowMajorMat>(c.data_ptr<double>(), rows, cols);
}

jacond::Vec to_eigen_vec(const at::Tensor& t) {
  jacond::Mat m = to_eigen(t);
  if (m.cols() != 1 && m.rows() != 1) {
    throw std::invalid_argument("to_eigen_vec: expected a vector, got shape " +
                                shape_str(t.sizes()));
  }
  return m.cols() == 1 ? jacond::Vec(m.col(0)) : jacond::Vec(m.row(0).transpose());
}

at::Tensor to_torch(const jacond::Mat& m) {
  torch::Tensor t = torch::empty({m.rows(), m.cols()}, torch::kFloat64);
  Eigen::Map<RowMajorMat>(t.data_ptr<double>(), m.rows(), m.cols()) = m;
  return t;
}

at::Tensor to_torch_vec(const jacond::Vec& v) {
  torch::Tensor t = torch::empty({v.size()}, torch::kFloat64);
  Eigen::Map<jacond::Vec>(t.data_ptr<double>(), v.size()) = v;
  return t;
}

namespace {

// The map's tensors as fp64 arrays for the timm layout (a 3-D or 0-D tensor keeps only its shape,
// which the layout then rejects by name).
jacond::TimmLookup timm_lookup(const TensorMap& tensors) {
  return [&tensors](const std::string& key) -> std::optional<jacond::TimmArray> {
    const auto it = tensors.find(key);
    if (it == tensors.end()) return std::nullopt;
    const torch::Tensor& t = it->second;
    if (!t.defined()) throw std::invalid_argument(key + " is an undefined tensor");
    if (!t.is_floating_point()) {
      std::ostringstream os;
      os << key << " has non-floating dtype " << t.scalar_type();
      throw std::invalid_argument(os.str());
    }
    if (t.dim() != 1 && t.dim() != 2) return jacond::TimmArray{{t.sizes().begin(), t.sizes().end()}, jacond::Mat()};
    return jacond::TimmArray{{t.sizes().begin(), t.sizes().end()}, to_eigen(t)};
  };
}

}  // namespace

jacond::BlockWeights block_from_timm(const TensorMap& tensors, int64_t layer, int64_t heads,
                                     double logit_scale, double ln_eps, bool fold_branch_scales) {
  std::vector<std::string> keys;
  keys.reserve(tensors.size());
  for (const auto& [key, t] : tensors) keys.push_back(key);
  jacond::require_known_block_keys(keys, layer);
  return jacond::block_from_timm_layout(timm_lookup(tensors), layer, heads, logit_scale, ln_eps, fold_branch_scales);
}

void block_to_timm(const jacond::BlockWeights& w, int64_t layer, TensorMap& out) {
  for (const auto& [key, a] : jacond::block_to_timm_layout(w, layer))
    out[key] = a.shape.size() == 1 ? to_torch_vec(a.values.col(0)) : to_torch(a.values);
}

jacond::BlockWeights analysis_block(const TensorMap& state, const ViTConfig& cfg, int64_t layer,
                                    jacond::SkipMode* analysis_skip) {
  if (cfg.skip == SkipKind::kRezero) {  // block_from_timm folds α₁, α₂ in; without them the block is another one
    const std::string p = "blocks." + std::to_string(layer) + ".";
    for (const char* key : {"rezero_attn", "rezero_mlp"})
      if (!state.count(p + key)) throw std::invalid_argument("missing key " + p + key + " (the model's skip is rezero)");
  }
  jacond::BlockWeights w = block_from_timm(state, layer, cfg.heads, 0.0, cfg.ln_eps);
  if (analysis_skip) *analysis_skip = analysis_skip_mode(cfg.skip);
  return w;
}

}  // namespace jacond::models
