#include "analysis/jacobians/block.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace jacond {

SkipMode parse_skip_mode(const std::string& s) {
  // "sab" and "ffn", the spellings before "no-ffn-skip" / "no-sab-skip", named the residual that
  // is kept; configs and scripts written with them still read the same.
  if (s == "sab") return SkipMode::kSab;
  if (s == "ffn") return SkipMode::kFfn;
  std::string valid;
  for (SkipMode m : kSkipModes) {
    if (to_string(m) == s) return m;
    valid += (valid.empty() ? "" : " | ") + to_string(m);
  }
  throw std::invalid_argument("unknown skip mode '" + s + "' (valid: " + valid + ")");
}

std::string to_string(SkipMode m) {
  switch (m) {
    case SkipMode::kNone: return "none";
    case SkipMode::kFull: return "full";
    case SkipMode::kSab: return "no-ffn-skip";
    case SkipMode::kFfn: return "no-sab-skip";
  }
  return "?";
}

double BlockWeights::effective_logit_scale() const {
  return logit_scale != 0.0 ? logit_scale : 1.0 / std::sqrt(static_cast<double>(head_dim()));
}

namespace {

void check_shape(const char* name, Index rows, Index cols, Index want_rows, Index want_cols) {
  if (rows != want_rows || cols != want_cols) {
    std::ostringstream os;
    os << "block weight " << name << " has shape [" << rows << ", " << cols << "], expected ["
       << want_rows << ", " << want_cols << "]";
    throw std::invalid_argument(os.str());
  }
}

template <typename M>
void check_finite(const char* name, const M& m) {
  if (!m.allFinite()) throw std::invalid_argument(std::string("block weight ") + name + " contains NaN or inf");
}

}  // namespace

void BlockWeights::validate() const {
  if (d <= 0 || heads <= 0 || hidden <= 0) {
    std::ostringstream os;
    os << "block sizes must be positive (d=" << d << ", heads=" << heads << ", hidden=" << hidden << ")";
    throw std::invalid_argument(os.str());
  }
  if (d % heads != 0) {
    std::ostringstream os;
    os << "d=" << d << " is not divisible by heads=" << heads;
    throw std::invalid_argument(os.str());
  }
  if (!std::isfinite(logit_scale) || !(ln_eps > 0.0) || !std::isfinite(ln_eps))
    throw std::invalid_argument("logit_scale must be finite and ln_eps positive");
  const struct { const char* name; const Vec* v; Index n; } vecs[] = {
      {"ln1_gamma", &ln1_gamma, d}, {"ln1_beta", &ln1_beta, d}, {"bq", &bq, d}, {"bk", &bk, d},
      {"bv", &bv, d}, {"bo", &bo, d}, {"ln2_gamma", &ln2_gamma, d}, {"ln2_beta", &ln2_beta, d},
      {"b1", &b1, hidden}, {"b2", &b2, d}};
  for (const auto& e : vecs) {
    check_shape(e.name, e.v->size(), 1, e.n, 1);
    check_finite(e.name, *e.v);
  }
  const struct { const char* name; const Mat* m; Index r, c; } mats[] = {
      {"Wq", &Wq, d, d}, {"Wk", &Wk, d, d}, {"Wv", &Wv, d, d}, {"Wo", &Wo, d, d},
      {"W1", &W1, d, hidden}, {"W2", &W2, hidden, d}};
  for (const auto& e : mats) {
    check_shape(e.name, e.m->rows(), e.m->cols(), e.r, e.c);
    check_finite(e.name, *e.m);
  }
}

BlockWeights BlockWeights::zeros(Index d, Index heads, Index hidden) {
  BlockWeights w;
  w.d = d;
  w.heads = heads;
  w.hidden = hidden;
  w.ln1_gamma = Vec::Ones(d);
  w.ln1_beta = Vec::Zero(d);
  w.ln2_gamma = Vec::Ones(d);
  w.ln2_beta = Vec::Zero(d);
  w.Wq = w.Wk = w.Wv = w.Wo = Mat::Zero(d, d);
  w.bq = w.bk = w.bv = w.bo = Vec::Zero(d);
  w.W1 = Mat::Zero(d, hidden);
  w.b1 = Vec::Zero(hidden);
  w.W2 = Mat::Zero(hidden, d);
  w.b2 = Vec::Zero(d);
  return w;
}

double gelu(double z) { return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))); }

// d/dz [z Φ(z)] = Φ(z) + z φ(z).
double gelu_derivative(double z) {
  const double Phi = 0.5 * (1.0 + std::erf(z / std::sqrt(2.0)));
  const double phi = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return Phi + z * phi;
}

Mat softmax_rows(const Mat& M) {
  Mat A(M.rows(), M.cols());
  for (Index i = 0; i < M.rows(); ++i) {
    const double mx = M.row(i).maxCoeff();
    A.row(i) = (M.row(i).array() - mx).exp().matrix();
    A.row(i) /= A.row(i).sum();
  }
  return A;
}

LayerNormCache layernorm_forward(const Mat& X, const Vec& gamma, const Vec& beta, double eps) {
  const Index n = X.rows(), d = X.cols();
  LayerNormCache c;
  c.x_hat.resize(n, d);
  c.inv_sigma.resize(n);
  for (Index i = 0; i < n; ++i) {
    // Rows whose largest |x| reaches 2^500 (their sum of squares may overflow fp64 from ~1e154/√d:
    // tokens × 1e200 gave x̂ = 0 and a `singular` K_sa, found by a review) are normalised in units
    // of 2^k > max|x|. Scaling by a power of two commutes with rounding, so
    //   var + eps = 2^2k (var_y + eps 2^−2k),  1/sqrt(var + eps) = 2^−k / sqrt(var_y + eps 2^−2k)
    // give the unscaled formula's bits wherever that one is in range. Every other row (k = 0) takes
    // the unscaled formula itself: tiny rows need nothing, eps dominates their variance. So does a
    // constant huge row, whose var_y + eps 2^−2k is 0 once eps 2^−2k underflows.
    const double top = X.row(i).cwiseAbs().maxCoeff();
    int k = top >= std::ldexp(1.0, 500) ? std::ilogb(top) + 1 : 0;
    const double scale = std::ldexp(1.0, -k);
    RowVec centered = (X.row(i) * scale).array() - (X.row(i) * scale).mean();
    double var_plus_eps = centered.squaredNorm() / static_cast<double>(d) + std::ldexp(eps, -2 * k);  // biased, as torch
    if (!(var_plus_eps > 0)) {
      k = 0;
      centered = X.row(i).array() - X.row(i).mean();
      var_plus_eps = centered.squaredNorm() / static_cast<double>(d) + eps;
    }
    const double inv_scaled = 1.0 / std::sqrt(var_plus_eps);
    c.inv_sigma(i) = std::ldexp(inv_scaled, -k);
    c.x_hat.row(i) = centered * inv_scaled;
  }
  c.y = (c.x_hat.array().rowwise() * gamma.transpose().array()).rowwise() + beta.transpose().array();
  return c;
}

AttentionCache attention_forward(const BlockWeights& w, const Mat& Y) {
  const Index n = Y.rows(), dh = w.head_dim();
  const double s = w.effective_logit_scale();
  AttentionCache c;
  c.Y = Y;
  c.Q = (Y * w.Wq).rowwise() + w.bq.transpose();
  c.K = (Y * w.Wk).rowwise() + w.bk.transpose();
  c.V = (Y * w.Wv).rowwise() + w.bv.transpose();
  c.heads_out.resize(n, w.d);
  c.A.resize(w.heads);
  for (Index h = 0; h < w.heads; ++h) {
    const auto Qh = c.Q.middleCols(h * dh, dh);
    const auto Kh = c.K.middleCols(h * dh, dh);
    c.A[h] = softmax_rows(s * Qh * Kh.transpose());  // M_h = s Q_h K_hᵀ
    c.heads_out.middleCols(h * dh, dh) = c.A[h] * c.V.middleCols(h * dh, dh);
  }
  c.out = (c.heads_out * w.Wo).rowwise() + w.bo.transpose();
  return c;
}

MlpCache mlp_forward(const BlockWeights& w, const Mat& Y) {
  MlpCache c;
  c.Y = Y;
  c.pre = (Y * w.W1).rowwise() + w.b1.transpose();
  c.act = c.pre.unaryExpr([](double z) { return gelu(z); });
  c.out = (c.act * w.W2).rowwise() + w.b2.transpose();
  return c;
}

BlockForward attention_only_forward(const BlockWeights& w, const Mat& X) {
  if (X.cols() != w.d) {
    std::ostringstream os;
    os << "tokens have d=" << X.cols() << " but the block has d=" << w.d;
    throw std::invalid_argument(os.str());
  }
  if (!X.allFinite()) throw std::invalid_argument("tokens contain NaN or inf");
  BlockForward f;
  f.X = X;
  f.attn = attention_forward(w, X);
  if (!f.attn.out.allFinite())  // as block_forward: say where, once, not as a NaN matrix downstream
    throw std::invalid_argument("the attention branch overflows fp64 at these weights and tokens (softmax logits "
                                "s Q_h K_h^T or A V W_O not finite): the weights or tokens are too large");
  return f;
}

BlockForward block_forward(const BlockWeights& w, const Mat& X, SkipMode skip) {
  if (X.cols() != w.d) {
    std::ostringstream os;
    os << "tokens have d=" << X.cols() << " but the block has d=" << w.d;
    throw std::invalid_argument(os.str());
  }
  if (!X.allFinite()) throw std::invalid_argument("tokens contain NaN or inf");
  BlockForward f;
  f.skip = skip;
  f.X = X;
  f.ln1 = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  f.attn = attention_forward(w, f.ln1.y);
  f.X1 = sab_residual(skip) ? Mat(X + f.attn.out) : f.attn.out;
  f.ln2 = layernorm_forward(f.X1, w.ln2_gamma, w.ln2_beta, w.ln_eps);
  f.mlp = mlp_forward(w, f.ln2.y);
  f.X2 = ffn_residual(skip) ? Mat(f.X1 + f.mlp.out) : f.mlp.out;
  // Finite weights and tokens can still overflow fp64 (logits s·q·k past 1.8e308 make the softmax
  // inf − inf = NaN): every Jacobian at such a point is NaN, so say where, once, here.
  if (!f.attn.out.allFinite())
    throw std::invalid_argument("the attention branch overflows fp64 at these weights and tokens (softmax logits "
                                "s Q_h K_h^T or A V W_O not finite): the weights or tokens are too large");
  if (!f.X2.allFinite())
    throw std::invalid_argument("the block's output overflows fp64 at these weights and tokens (X + SA, the MLP "
                                "branch or their sum not finite): the weights or tokens are too large");
  return f;
}

}  // namespace jacond
