// The timm layout of a block (see timm_layout.h). The Linear transpose happens here only.
#include "analysis/jacobians/timm_layout.h"

#include <set>
#include <sstream>
#include <stdexcept>

namespace jacond {
namespace {

std::string shape_str(const std::vector<Index>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

TimmArray require(const TimmLookup& lookup, const std::string& key) {
  std::optional<TimmArray> a = lookup(key);
  if (!a) throw std::invalid_argument("missing key " + key);
  return std::move(*a);
}

// `a` (stored under `key`) with exactly `expected` shape and finite entries.
Mat checked(TimmArray a, const std::string& key, const std::vector<Index>& expected) {
  if (a.shape != expected)
    throw std::invalid_argument(key + " has wrong shape: expected " + shape_str(expected) + ", got " + shape_str(a.shape));
  if (a.values.array().isNaN().any()) throw std::invalid_argument(key + " contains NaN");
  if (!a.values.allFinite()) throw std::invalid_argument(key + " contains inf");
  return std::move(a.values);
}

Mat fetch(const TimmLookup& lookup, const std::string& key, const std::vector<Index>& expected) {
  return checked(require(lookup, key), key, expected);
}

// x + g ∘ (h W + b) = x + h (W diag g) + g ∘ b for the branch scale stored under `key`, if any: a
// per-feature g of shape [d] (LayerScale) or one α of shape [1] (ReZero).
void fold_branch_scale(const TimmLookup& lookup, const std::string& key, bool per_feature, Mat& W, Vec& b) {
  std::optional<TimmArray> a = lookup(key);
  if (!a) return;
  const Index d = b.size();
  const Mat g = checked(std::move(*a), key, {per_feature ? d : 1});
  const Vec scale = per_feature ? Vec(g.col(0)) : Vec::Constant(d, g(0, 0));
  W = W * scale.asDiagonal();
  b = b.cwiseProduct(scale);
}

Vec fetch_vec(const TimmLookup& lookup, const std::string& key, Index size) { return fetch(lookup, key, {size}).col(0); }

// A Linear's bias: absent means the layer has none (timm's qkv_bias=False, Mlp's bias=False),
// which is the same function as a bias of zeros. (A norm's bias stays required: without one, a
// LayerNorm(bias=False) and an RMSNorm store the same keys, and only the first is this block.)
Vec fetch_bias(const TimmLookup& lookup, const std::string& key, Index size) {
  std::optional<TimmArray> a = lookup(key);
  return a ? Vec(checked(std::move(*a), key, {size}).col(0)) : Vec::Zero(size);
}

// The size of a key looked up before its shape is known (norm1.weight: d; mlp.fc1.weight: hidden).
Index leading_size(const TimmLookup& lookup, const std::string& key, size_t rank) {
  const TimmArray a = require(lookup, key);
  Index numel = 1;
  for (Index s : a.shape) numel *= s;
  if (a.shape.size() != rank || numel == 0)
    throw std::invalid_argument(key + " has wrong shape: expected a non-empty " + std::to_string(rank) + "-D tensor, got " +
                                shape_str(a.shape));
  return a.shape[0];
}

TimmArray array_of(const Mat& m) { return {{m.rows(), m.cols()}, m}; }
TimmArray array_of(const Vec& v) { return {{v.size()}, v}; }

}  // namespace

BlockWeights block_from_timm_layout(const TimmLookup& lookup, Index layer, Index heads, double logit_scale,
                                    double ln_eps, bool fold_branch_scales) {
  const std::string p = "blocks." + std::to_string(layer) + ".";
  const Index d = leading_size(lookup, p + "norm1.weight", 1);
  if (heads <= 0) throw std::invalid_argument(p + "attn: heads must be positive (got " + std::to_string(heads) + ")");
  if (d % heads != 0)
    throw std::invalid_argument(p + "norm1.weight gives d = " + std::to_string(d) + ", not divisible by heads = " +
                                std::to_string(heads));
  const Index hidden = leading_size(lookup, p + "mlp.fc1.weight", 2);

  BlockWeights w;
  w.d = d, w.heads = heads, w.hidden = hidden, w.logit_scale = logit_scale, w.ln_eps = ln_eps;
  w.ln1_gamma = fetch_vec(lookup, p + "norm1.weight", d);
  w.ln1_beta = fetch_vec(lookup, p + "norm1.bias", d);
  // qkv.weight rows Q|K|V, each block Wᵀ (out×in) -> W (in×out).
  const Mat qkv = fetch(lookup, p + "attn.qkv.weight", {3 * d, d});
  w.Wq = qkv.middleRows(0, d).transpose();
  w.Wk = qkv.middleRows(d, d).transpose();
  w.Wv = qkv.middleRows(2 * d, d).transpose();
  const Vec qkv_b = fetch_bias(lookup, p + "attn.qkv.bias", 3 * d);
  w.bq = qkv_b.segment(0, d), w.bk = qkv_b.segment(d, d), w.bv = qkv_b.segment(2 * d, d);
  w.Wo = fetch(lookup, p + "attn.proj.weight", {d, d}).transpose();
  w.bo = fetch_bias(lookup, p + "attn.proj.bias", d);
  w.ln2_gamma = fetch_vec(lookup, p + "norm2.weight", d);
  w.ln2_beta = fetch_vec(lookup, p + "norm2.bias", d);
  w.W1 = fetch(lookup, p + "mlp.fc1.weight", {hidden, d}).transpose();  // d × hidden
  w.b1 = fetch_bias(lookup, p + "mlp.fc1.bias", hidden);
  w.W2 = fetch(lookup, p + "mlp.fc2.weight", {d, hidden}).transpose();  // hidden × d
  w.b2 = fetch_bias(lookup, p + "mlp.fc2.bias", d);
  if (fold_branch_scales) {
    fold_branch_scale(lookup, p + "ls1.gamma", true, w.Wo, w.bo);
    fold_branch_scale(lookup, p + "rezero_attn", false, w.Wo, w.bo);
    fold_branch_scale(lookup, p + "ls2.gamma", true, w.W2, w.b2);
    fold_branch_scale(lookup, p + "rezero_mlp", false, w.W2, w.b2);
  }
  w.validate();
  return w;
}

void require_known_block_keys(const std::vector<std::string>& keys, Index layer) {
  static const std::set<std::string> known = {
      "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
      "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
      "ls1.gamma",    "ls2.gamma",  "rezero_attn",     "rezero_mlp"};
  const std::string p = "blocks." + std::to_string(layer) + ".";
  for (const std::string& key : keys)
    if (key.rfind(p, 0) == 0 && !known.count(key.substr(p.size())))
      throw std::invalid_argument(key + " is not a parameter of the block jacond analyses (timm names: norm1, attn.qkv, "
                                        "attn.proj, norm2, mlp.fc1, mlp.fc2, ls1/ls2.gamma); refusing to analyse another block");
}

std::vector<std::pair<std::string, TimmArray>> block_to_timm_layout(const BlockWeights& w, Index layer) {
  w.validate();
  const std::string p = "blocks." + std::to_string(layer) + ".";
  Mat qkv(3 * w.d, w.d);
  qkv << w.Wq.transpose(), w.Wk.transpose(), w.Wv.transpose();
  Vec qkv_b(3 * w.d);
  qkv_b << w.bq, w.bk, w.bv;
  return {{p + "norm1.weight", array_of(w.ln1_gamma)}, {p + "norm1.bias", array_of(w.ln1_beta)},
          {p + "attn.qkv.weight", array_of(qkv)},      {p + "attn.qkv.bias", array_of(qkv_b)},
          {p + "attn.proj.weight", array_of(Mat(w.Wo.transpose()))}, {p + "attn.proj.bias", array_of(w.bo)},
          {p + "norm2.weight", array_of(w.ln2_gamma)}, {p + "norm2.bias", array_of(w.ln2_beta)},
          {p + "mlp.fc1.weight", array_of(Mat(w.W1.transpose()))}, {p + "mlp.fc1.bias", array_of(w.b1)},
          {p + "mlp.fc2.weight", array_of(Mat(w.W2.transpose()))}, {p + "mlp.fc2.bias", array_of(w.b2)}};
}

}  // namespace jacond
