// LibTorch ↔ analysis weights. The Linear transpose (timm weight = Wᵀ) happens here only
// (docs/design.md §2); see bridge.h for the key layout.
#include "models/track/bridge.h"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

/// Looks up `key`, checks its shape and that every entry is finite.
const torch::Tensor& fetch(const TensorMap& tensors, const std::string& key,
                           std::vector<int64_t> expected) {
  auto it = tensors.find(key);
  if (it == tensors.end()) throw std::invalid_argument("missing key " + key);
  const torch::Tensor& t = it->second;
  if (!t.defined()) throw std::invalid_argument(key + " is an undefined tensor");
  if (!t.sizes().equals(expected)) {
    throw std::invalid_argument(key + " has wrong shape: expected " + shape_str(expected) +
                                ", got " + shape_str(t.sizes()));
  }
  if (!t.is_floating_point()) {
    std::ostringstream os;
    os << key << " has non-floating dtype " << t.scalar_type();
    throw std::invalid_argument(os.str());
  }
  if (torch::isnan(t).any().item<bool>()) throw std::invalid_argument(key + " contains NaN");
  if (torch::isinf(t).any().item<bool>()) throw std::invalid_argument(key + " contains inf");
  return t;
}

/// Rank of a tensor that is looked up before its size is known (norm1.weight, fc1.weight).
const torch::Tensor& fetch_rank(const TensorMap& tensors, const std::string& key, int64_t dim) {
  auto it = tensors.find(key);
  if (it == tensors.end()) throw std::invalid_argument("missing key " + key);
  if (!it->second.defined() || it->second.dim() != dim || it->second.numel() == 0) {
    throw std::invalid_argument(key + " has wrong shape: expected a non-empty " +
                                std::to_string(dim) + "-D tensor, got " +
                                (it->second.defined() ? shape_str(it->second.sizes())
                                                      : std::string("undefined")));
  }
  return it->second;
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

jacond::BlockWeights block_from_timm(const TensorMap& tensors, int64_t layer, int64_t heads,
                                     double logit_scale, double ln_eps) {
  const std::string p = "blocks." + std::to_string(layer) + ".";
  const int64_t d = fetch_rank(tensors, p + "norm1.weight", 1).size(0);
  if (heads <= 0) {
    throw std::invalid_argument(p + "attn: heads must be positive (got " +
                                std::to_string(heads) + ")");
  }
  if (d % heads != 0) {
    throw std::invalid_argument(p + "norm1.weight gives d = " + std::to_string(d) +
                                ", not divisible by heads = " + std::to_string(heads));
  }
  const int64_t hidden = fetch_rank(tensors, p + "mlp.fc1.weight", 2).size(0);

  jacond::BlockWeights w;
  w.d = d;
  w.heads = heads;
  w.hidden = hidden;
  w.logit_scale = logit_scale;
  w.ln_eps = ln_eps;

  w.ln1_gamma = to_eigen_vec(fetch(tensors, p + "norm1.weight", {d}));
  w.ln1_beta = to_eigen_vec(fetch(tensors, p + "norm1.bias", {d}));

  // qkv.weight rows Q|K|V, each block = Wᵀ (out×in) -> transpose to W (in×out).
  const torch::Tensor& qkv_w = fetch(tensors, p + "attn.qkv.weight", {3 * d, d});
  w.Wq = to_eigen(qkv_w.slice(0, 0, d)).transpose();
  w.Wk = to_eigen(qkv_w.slice(0, d, 2 * d)).transpose();
  w.Wv = to_eigen(qkv_w.slice(0, 2 * d, 3 * d)).transpose();
  const torch::Tensor& qkv_b = fetch(tensors, p + "attn.qkv.bias", {3 * d});
  w.bq = to_eigen_vec(qkv_b.slice(0, 0, d));
  w.bk = to_eigen_vec(qkv_b.slice(0, d, 2 * d));
  w.bv = to_eigen_vec(qkv_b.slice(0, 2 * d, 3 * d));
  w.Wo = to_eigen(fetch(tensors, p + "attn.proj.weight", {d, d})).transpose();
  w.bo = to_eigen_vec(fetch(tensors, p + "attn.proj.bias", {d}));

  w.ln2_gamma = to_eigen_vec(fetch(tensors, p + "norm2.weight", {d}));
  w.ln2_beta = to_eigen_vec(fetch(tensors, p + "norm2.bias", {d}));

  w.W1 = to_eigen(fetch(tensors, p + "mlp.fc1.weight", {hidden, d})).transpose();  // d×hidden
  w.b1 = to_eigen_vec(fetch(tensors, p + "mlp.fc1.bias", {hidden}));
  w.W2 = to_eigen(fetch(tensors, p + "mlp.fc2.weight", {d, hidden})).transpose();  // hidden×d
  w.b2 = to_eigen_vec(fetch(tensors, p + "mlp.fc2.bias", {d}));

  w.validate();
  return w;
}

void block_to_timm(const jacond::BlockWeights& w, int64_t layer, TensorMap& out) {
  w.validate();
  const std::string p = "blocks." + std::to_string(layer) + ".";
  out[p + "norm1.weight"] = to_torch_vec(w.ln1_gamma);
  out[p + "norm1.bias"] = to_torch_vec(w.ln1_beta);
  out[p + "attn.qkv.weight"] =
      torch::cat({to_torch(w.Wq.transpose()), to_torch(w.Wk.transpose()),
                  to_torch(w.Wv.transpose())},
                 0);
  out[p + "attn.qkv.bias"] =
      torch::cat({to_torch_vec(w.bq), to_torch_vec(w.bk), to_torch_vec(w.bv)}, 0);
  out[p + "attn.proj.weight"] = to_torch(w.Wo.transpose());
  out[p + "attn.proj.bias"] = to_torch_vec(w.bo);
  out[p + "norm2.weight"] = to_torch_vec(w.ln2_gamma);
  out[p + "norm2.bias"] = to_torch_vec(w.ln2_beta);
  out[p + "mlp.fc1.weight"] = to_torch(w.W1.transpose());
  out[p + "mlp.fc1.bias"] = to_torch_vec(w.b1);
  out[p + "mlp.fc2.weight"] = to_torch(w.W2.transpose());
  out[p + "mlp.fc2.bias"] = to_torch_vec(w.b2);
}

jacond::BlockWeights analysis_block(const TensorMap& state, const ViTConfig& cfg, int64_t layer,
                                    jacond::SkipMode* analysis_skip) {
  jacond::BlockWeights w = block_from_timm(state, layer, cfg.heads, 0.0, cfg.ln_eps);
  if (cfg.skip == SkipKind::kRezero) {
    const std::string p = "blocks." + std::to_string(layer) + ".";
    const double a1 = fetch(state, p + "rezero_attn", {1}).item<double>();
    const double a2 = fetch(state, p + "rezero_mlp", {1}).item<double>();
    w.Wo *= a1;
    w.bo *= a1;
    w.W2 *= a2;
    w.b2 *= a2;
  }
  if (analysis_skip) *analysis_skip = analysis_skip_mode(cfg.skip);
  return w;
}

}  // namespace jacond::models
