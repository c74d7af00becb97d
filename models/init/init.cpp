// Initializations of docs/design.md §3. See init.h for the math; this file fixes the draw order.
//
// Draw order from block `layer`'s generator (seeded with layer_seed(cfg.seed, layer)):
//   timm:    qkv.weight [3d,d], proj.weight [d,d], then the MLP (below).
//   ours:    Z_0, …, Z_{h−1} (each d×d, Q/K, Eq. 11), G (d×d, V/O), then the MLP.
//   mimetic: Z_0, …, Z_{h−1} (Q/K), Z (d×d, V/O), then the MLP.
//   MLP:     fc1.weight [hidden,d], then fc2.weight [d,hidden]: for kTimm one trunc_normal each;
//            for kDks one Gaussian max(out,in)×min(out,in) each.
// Every draw is a whole fp64 tensor filled row-major. Biases and LayerNorms draw nothing.
#include "models/init/init.h"

#include "models/io/error_text.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace jacond::models {
namespace {

constexpr double kTimmStd = 0.02;   // docs/design.md §3: trunc_normal(std 0.02, cut at ±2 absolute)
constexpr double kTimmCut = 2.0;
constexpr double kMimeticQk = 0.7;  // Trockman & Kolter: α = β = 0.7 for Q/K
constexpr double kMimeticVo = 0.4;  // Trockman & Kolter: T = 0.4 Z − 0.4 I for V/O

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Standard normal CDF Φ(x) = ½ erfc(−x/√2) (erfc keeps the lower tail accurate).
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("init_block: " + what);
}

template <typename T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// Z ∈ R^{d×d}, Z_ij ~ N(0, 1/d) (paper Eq. 11).
torch::Tensor draw_z(int64_t d, at::Generator& gen) {
  return torch::randn({d, d}, gen, kF64).div_(std::sqrt(static_cast<double>(d)));
}

/// Thin SVD T = U diag(S) Vᵀ; returns (U, S, V) (V, not Vᵀ).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> thin_svd(const torch::Tensor& T) {
  auto [U, S, Vh] = torch::linalg_svd(T, /*full_matrices=*/false);
  return {U, S, Vh.t()};
}

struct QK {
  torch::Tensor Wq, Wk;  // d×d, paper convention (Q = Y W^Q)
};

/// Q/K per head h (Eq. 11, docs/design.md §3): T_h = α Z_h + β I, T_h = U S Vᵀ,
/// W^Q_h = U[:, :d_h] sqrt(S[:d_h]), W^K_h = V[:, :d_h] sqrt(S[:d_h]) fill columns
/// [h·d_h, (h+1)·d_h) of W^Q, W^K, so W^Q_h W^K_hᵀ = best rank-d_h approximation of T_h.
QK init_qk(int64_t d, int64_t heads, double alpha, double beta, at::Generator& gen) {
  const int64_t dh = d / heads;
  std::vector<torch::Tensor> q_cols, k_cols;
  for (int64_t h = 0; h < heads; ++h) {
    torch::Tensor T = alpha * draw_z(d, gen) + beta * torch::eye(d, kF64);
    auto [U, S, V] = thin_svd(T);
    torch::Tensor root = S.slice(0, 0, dh).sqrt();  // sqrt(S[:d_h]), scales columns
    q_cols.push_back(U.slice(1, 0, dh) * root);
    k_cols.push_back(V.slice(1, 0, dh) * root);
  }
  return {torch::cat(q_cols, 1), torch::cat(k_cols, 1)};
}

struct VO {
  torch::Tensor Wv, Wo;  // d×d, paper convention (V = Y W^V, out = heads W^O)
};

/// `ours` V/O (docs/design.md §3): G ~ N(0,1), G = U S Vᵀ, W^V = c U, W^O = c Vᵀ ⇒ W^V W^O = c² U Vᵀ.
VO init_vo_ours(int64_t d, double c, at::Generator& gen) {
  torch::Tensor G = torch::randn({d, d}, gen, kF64);
  auto [U, S, V] = thin_svd(G);
  return {c * U, c * V.t()};
}

/// `mimetic` V/O (docs/design.md §3): T = 0.4 Z − 0.4 I, T = U S Vᵀ, W^V = U sqrt(S), W^O = sqrt(S) Vᵀ
/// ⇒ W^V W^O = T.
VO init_vo_mimetic(int64_t d, at::Generator& gen) {
  torch::Tensor T = kMimeticVo * draw_z(d, gen) - kMimeticVo * torch::eye(d, kF64);
  auto [U, S, V] = thin_svd(T);
  torch::Tensor root = S.sqrt();
  return {U * root, root.unsqueeze(1) * V.t()};
}

torch::Tensor timm_linear_weight(int64_t out, int64_t in, at::Generator& gen) {
  return trunc_normal({out, in}, 0.0, kTimmStd, -kTimmCut, kTimmCut, gen);
}

torch::Tensor mlp_weight(MlpInit mlp, int64_t out, int64_t in, at::Generator& gen) {
  return mlp == MlpInit::kDks ? dks_orthogonal(out, in, gen) : timm_linear_weight(out, in, gen);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

InitConfig InitConfig::for_scheme(InitScheme scheme, uint64_t seed) {
  InitConfig cfg;
  cfg.scheme = scheme;
  cfg.mlp = default_mlp_init(scheme);
  cfg.seed = seed;
  return cfg;
}

InitScheme parse_init_scheme(const std::string& s) {
  if (s == "timm") return InitScheme::kTimm;
  if (s == "ours") return InitScheme::kOurs;
  if (s == "mimetic") return InitScheme::kMimetic;
  throw std::invalid_argument("unknown init scheme '" + printable(s) + "' (valid: timm, ours, mimetic)");
}

std::string to_string(InitScheme s) {
  switch (s) {
    case InitScheme::kTimm: return "timm";
    case InitScheme::kOurs: return "ours";
    case InitScheme::kMimetic: return "mimetic";
  }
  throw std::invalid_argument("to_string: invalid InitScheme value " + str(static_cast<int>(s)));
}

MlpInit parse_mlp_init(const std::string& s) {
  if (s == "timm") return MlpInit::kTimm;
  if (s == "dks") return MlpInit::kDks;
  throw std::invalid_argument("unknown MLP init '" + printable(s) + "' (valid: timm, dks)");
}

std::string to_string(MlpInit m) {
  switch (m) {
    case MlpInit::kTimm: return "timm";
    case MlpInit::kDks: return "dks";
  }
  throw std::invalid_argument("to_string: invalid MlpInit value " + str(static_cast<int>(m)));
}

MlpInit default_mlp_init(InitScheme s) {
  return s == InitScheme::kOurs ? MlpInit::kDks : MlpInit::kTimm;
}

uint64_t layer_seed(uint64_t seed, int64_t layer) {
  return splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(layer));
}

torch::Tensor trunc_normal(at::IntArrayRef shape, double mean, double std, double a, double b,
                           at::Generator& gen) {
  if (!(std > 0.0) || !std::isfinite(std) || !std::isfinite(mean) || !(a < b)) {
    throw std::invalid_argument("trunc_normal: need finite mean, std > 0 and a < b (mean " +
                                str(mean) + ", std " + str(std) + ", a " + str(a) + ", b " +
                                str(b) + ")");
  }
  // u ~ U(Φ(a'), Φ(b')) drawn as 2u − 1 directly; x = mean + std·√2·erfinv(2u − 1).
  const double lo = 2.0 * normal_cdf((a - mean) / std) - 1.0;
  const double hi = 2.0 * normal_cdf((b - mean) / std) - 1.0;
  torch::Tensor t = torch::empty(shape, kF64).uniform_(lo, hi, gen);
  // With the timm cut (±100 std) lo = −1 exactly, so erfinv may give −inf: the clamp is the cut.
  return t.erfinv_().mul_(std * std::sqrt(2.0)).add_(mean).clamp_(a, b);
}

torch::Tensor dks_orthogonal(int64_t out, int64_t in, at::Generator& gen) {
  if (out <= 0 || in <= 0) {
    throw std::invalid_argument("dks_orthogonal: sizes must be positive (out " + str(out) +
                                ", in " + str(in) + ")");
  }
  const int64_t big = std::max(out, in), small = std::min(out, in);
  torch::Tensor G = torch::randn({big, small}, gen, kF64);
  auto [Q, R] = torch::linalg_qr(G, "reduced");  // Q: big×small, orthonormal columns
  // Haar fix: make diag(R) positive, i.e. Q ← Q diag(sign(diag R)) (sign 0 counts as +1).
  torch::Tensor diag = R.diagonal();
  torch::Tensor sign = torch::ones_like(diag).masked_fill_(diag < 0, -1.0);
  Q = Q * sign;  // scales column j by sign_j
  torch::Tensor W = out >= in ? Q : Q.t();
  const double scale = std::max(std::sqrt(static_cast<double>(out) / in), 1.0);
  return (scale * W).contiguous();
}

void init_block(TensorMap& out, int64_t layer, int64_t d, int64_t heads, int64_t hidden,
                const InitConfig& cfg) {
  require(layer >= 0, "layer must be >= 0 (got " + str(layer) + ")");
  require(d > 0, "d must be positive (got " + str(d) + ")");
  require(heads > 0, "heads must be positive (got " + str(heads) + ")");
  require(hidden > 0, "hidden must be positive (got " + str(hidden) + ")");
  require(d % heads == 0, "d = " + str(d) + " is not divisible by heads = " + str(heads));
  require(std::isfinite(cfg.alpha), "alpha must be finite (got " + str(cfg.alpha) + ")");
  require(std::isfinite(cfg.beta), "beta must be finite (got " + str(cfg.beta) + ")");
  require(std::isfinite(cfg.c), "c must be finite (got " + str(cfg.c) + ")");

  at::Generator gen = at::detail::createCPUGenerator(layer_seed(cfg.seed, layer));
  torch::NoGradGuard no_grad;

  torch::Tensor qkv_w, proj_w;  // torch Linear layout: qkv_w = [W^Q W^K W^V]ᵀ, proj_w = (W^O)ᵀ
  switch (cfg.scheme) {
    case InitScheme::kTimm:
      qkv_w = timm_linear_weight(3 * d, d, gen);
      proj_w = timm_linear_weight(d, d, gen);
      break;
    case InitScheme::kOurs: {
      QK qk = init_qk(d, heads, cfg.alpha, cfg.beta, gen);
      VO vo = init_vo_ours(d, cfg.c, gen);
      qkv_w = torch::cat({qk.Wq.t(), qk.Wk.t(), vo.Wv.t()}, 0);
      proj_w = vo.Wo.t();
      break;
    }
    case InitScheme::kMimetic: {
      QK qk = init_qk(d, heads, kMimeticQk, kMimeticQk, gen);
      VO vo = init_vo_mimetic(d, gen);
      qkv_w = torch::cat({qk.Wq.t(), qk.Wk.t(), vo.Wv.t()}, 0);
      proj_w = vo.Wo.t();
      break;
    }
    default:
      throw std::invalid_argument("init_block: invalid InitScheme value " +
                                  str(static_cast<int>(cfg.scheme)));
  }
  torch::Tensor fc1_w = mlp_weight(cfg.mlp, hidden, d, gen);
  torch::Tensor fc2_w = mlp_weight(cfg.mlp, d, hidden, gen);

  const std::string p = "blocks." + std::to_string(layer) + ".";
  out[p + "norm1.weight"] = torch::ones({d}, kF64);
  out[p + "norm1.bias"] = torch::zeros({d}, kF64);
  out[p + "attn.qkv.weight"] = qkv_w.contiguous();
  out[p + "attn.qkv.bias"] = torch::zeros({3 * d}, kF64);
  out[p + "attn.proj.weight"] = proj_w.contiguous();
  out[p + "attn.proj.bias"] = torch::zeros({d}, kF64);
  out[p + "norm2.weight"] = torch::ones({d}, kF64);
  out[p + "norm2.bias"] = torch::zeros({d}, kF64);
  out[p + "mlp.fc1.weight"] = fc1_w;
  out[p + "mlp.fc1.bias"] = torch::zeros({hidden}, kF64);
  out[p + "mlp.fc2.weight"] = fc2_w;
  out[p + "mlp.fc2.bias"] = torch::zeros({d}, kF64);
}

}  // namespace jacond::models
