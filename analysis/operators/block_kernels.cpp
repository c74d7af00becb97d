// The block's tangent and adjoint kernels; the math is in analysis/operators/block_kernels.h.
#include "analysis/operators/block_kernels.h"

#include <stdexcept>
#include <string>

namespace jacond {

BlockParams BlockParams::zeros(const BlockWeights& w, bool attn, bool mlp) {
  BlockParams p;
  p.attn = attn;
  p.mlp = mlp;
  const Index d = w.d, h = w.hidden;
  if (attn) {
    p.Wq = p.Wk = p.Wv = p.Wo = Mat::Zero(d, d);
    p.bq = p.bk = p.bv = p.bo = Vec::Zero(d);
  }
  if (mlp) {
    p.W1 = Mat::Zero(d, h);
    p.W2 = Mat::Zero(h, d);
    p.b1 = Vec::Zero(h);
    p.b2 = Vec::Zero(d);
  }
  return p;
}

namespace {

// The affine map lin(Y) = Y W + 1 bᵀ. Tangent: dY W (+ Y dW + 1 dbᵀ when dW, db are given).
Mat linear_jvp(const Mat& dY, const Mat& Y, const Mat& W, const Mat* dW, const Vec* db) {
  Mat out = dY * W;
  if (dW) {
    out.noalias() += Y * *dW;
    out.rowwise() += db->transpose();
  }
  return out;
}

// Adjoint of lin: returns G Wᵀ; adds gW += Yᵀ G and gb += Gᵀ 1 when gW, gb are given.
Mat linear_vjp(const Mat& G, const Mat& Y, const Mat& W, Mat* gW, Vec* gb) {
  if (gW) {
    gW->noalias() += Y.transpose() * G;
    *gb += G.colwise().sum().transpose();
  }
  return G * W.transpose();
}

// A parameter slot of p (a tangent or a gradient), or nullptr when p is null.
template <typename P, typename T>
auto slot(P* p, T BlockParams::*member) -> decltype(&(p->*member)) {
  return p ? &(p->*member) : nullptr;
}

// The group of p the kernel uses: p itself when that group is present, else nullptr.
template <typename P>
P* attention_group(P* p, AttentionPart part, const char* who) {
  if (!p || !p->attn) return nullptr;
  if (part != AttentionPart::kFull)
    throw std::invalid_argument(std::string(who) + ": parameter tangents need AttentionPart::kFull");
  return p;
}
template <typename P>
P* mlp_group(P* p) {
  return p && p->mlp ? p : nullptr;
}

// Softmax row Jacobian diag(p) − p pᵀ applied to every row of `in`, p = the row of A:
// out[i,:] = p ∘ (in[i,:] − ⟨p, in[i,:]⟩). It is symmetric, so this is both its JVP and its VJP.
Mat softmax_rows_product(const Mat& A, const Mat& in) {
  const Vec inner = (A.array() * in.array()).rowwise().sum();
  return (A.array() * (in.colwise() - inner).array()).matrix();
}

// Columns [h d_h, (h+1) d_h) of M: head h's slice of Q, K, V, H and their tangents.
struct Heads {
  Index dh;
  auto operator()(const Mat& M, Index h) const { return M.middleCols(h * dh, dh); }
  auto operator()(Mat& M, Index h) const { return M.middleCols(h * dh, dh); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// LayerNorm.

namespace {
// Rows: P dx = σ⁻¹ (dx − mean(dx) 1 − x̂ ⟨x̂, dx⟩/d), the symmetric middle factor.
Mat layernorm_project(const LayerNormCache& c, const Mat& in) {
  const double d = static_cast<double>(in.cols());
  const Vec mean_in = in.rowwise().sum() / d;
  const Vec mean_xin = (c.x_hat.array() * in.array()).rowwise().sum().matrix() / d;  // ⟨x̂, dx⟩/d
  Mat out = in;
  out.colwise() -= mean_in;
  out -= (c.x_hat.array().colwise() * mean_xin.array()).matrix();
  return (out.array().colwise() * c.inv_sigma.array()).matrix();
}
}  // namespace

Mat layernorm_jvp(const Vec& gamma, const LayerNormCache& c, const Mat& dX) {
  return (layernorm_project(c, dX).array().rowwise() * gamma.transpose().array()).matrix();
}

Mat layernorm_vjp(const Vec& gamma, const LayerNormCache& c, const Mat& G) {
  return layernorm_project(c, (G.array().rowwise() * gamma.transpose().array()).matrix());
}

// ---------------------------------------------------------------------------------------------
// Attention.

Mat attention_jvp(const BlockWeights& w, const AttentionCache& c, const Mat& dY, AttentionPart part,
                  const BlockParams* dp) {
  const BlockParams* p = attention_group(dp, part, "attention_jvp");
  const bool via_v = part != AttentionPart::kE, via_a = part != AttentionPart::kB;
  const Heads head{w.head_dim()};
  const double s = w.effective_logit_scale();
  Mat dQ, dK, dV;
  if (via_a) {
    dQ = linear_jvp(dY, c.Y, w.Wq, slot(p, &BlockParams::Wq), slot(p, &BlockParams::bq));
    dK = linear_jvp(dY, c.Y, w.Wk, slot(p, &BlockParams::Wk), slot(p, &BlockParams::bk));
  }
  if (via_v) dV = linear_jvp(dY, c.Y, w.Wv, slot(p, &BlockParams::Wv), slot(p, &BlockParams::bv));
  Mat dH = Mat::Zero(c.Y.rows(), w.d);
  for (Index h = 0; h < w.heads; ++h) {
    const Mat& A = c.A[h];
    auto out = head(dH, h);
    if (via_v) out.noalias() += A * head(dV, h);
    if (via_a) {
      const Mat dM = s * (head(dQ, h) * head(c.K, h).transpose() + head(c.Q, h) * head(dK, h).transpose());
      out.noalias() += softmax_rows_product(A, dM) * head(c.V, h);
    }
  }
  return linear_jvp(dH, c.heads_out, w.Wo, slot(p, &BlockParams::Wo), slot(p, &BlockParams::bo));
}

Mat attention_vjp(const BlockWeights& w, const AttentionCache& c, const Mat& G, AttentionPart part, BlockParams* gp) {
  BlockParams* p = attention_group(gp, part, "attention_vjp");
  const bool via_v = part != AttentionPart::kE, via_a = part != AttentionPart::kB;
  const Heads head{w.head_dim()};
  const double s = w.effective_logit_scale();
  const Mat gH = linear_vjp(G, c.heads_out, w.Wo, slot(p, &BlockParams::Wo), slot(p, &BlockParams::bo));
  const Index n = c.Y.rows();
  Mat gQ, gK, gV;  // filled head by head, only on the paths `part` asks for
  if (via_a) {
    gQ.resize(n, w.d);
    gK.resize(n, w.d);
  }
  if (via_v) gV.resize(n, w.d);
  for (Index h = 0; h < w.heads; ++h) {
    const Mat& A = c.A[h];
    const auto gh = head(gH, h);
    if (via_v) head(gV, h).noalias() = A.transpose() * gh;
    if (via_a) {
      const Mat gM = s * softmax_rows_product(A, gh * head(c.V, h).transpose());
      head(gQ, h).noalias() = gM * head(c.K, h);
      head(gK, h).noalias() = gM.transpose() * head(c.Q, h);
    }
  }
  Mat gY = Mat::Zero(n, w.d);
  if (via_v) gY += linear_vjp(gV, c.Y, w.Wv, slot(p, &BlockParams::Wv), slot(p, &BlockParams::bv));
  if (via_a) {
    gY += linear_vjp(gQ, c.Y, w.Wq, slot(p, &BlockParams::Wq), slot(p, &BlockParams::bq));
    gY += linear_vjp(gK, c.Y, w.Wk, slot(p, &BlockParams::Wk), slot(p, &BlockParams::bk));
  }
  return gY;
}

// ---------------------------------------------------------------------------------------------
// MLP.

Mat mlp_gelu_prime(const MlpCache& c) {
  return c.pre.unaryExpr([](double z) { return gelu_derivative(z); });
}

Mat mlp_jvp(const BlockWeights& w, const MlpCache& c, const Mat& gelu_prime, const Mat& dY, const BlockParams* dp) {
  const BlockParams* p = mlp_group(dp);
  const Mat dpre = linear_jvp(dY, c.Y, w.W1, slot(p, &BlockParams::W1), slot(p, &BlockParams::b1));
  return linear_jvp(dpre.cwiseProduct(gelu_prime), c.act, w.W2, slot(p, &BlockParams::W2), slot(p, &BlockParams::b2));
}

Mat mlp_vjp(const BlockWeights& w, const MlpCache& c, const Mat& gelu_prime, const Mat& G, BlockParams* gp) {
  BlockParams* p = mlp_group(gp);
  const Mat gact = linear_vjp(G, c.act, w.W2, slot(p, &BlockParams::W2), slot(p, &BlockParams::b2));
  return linear_vjp(gact.cwiseProduct(gelu_prime), c.Y, w.W1, slot(p, &BlockParams::W1), slot(p, &BlockParams::b1));
}

// ---------------------------------------------------------------------------------------------
// Sub-blocks and the block.

Mat sab_jvp(const BlockWeights& w, const BlockForward& f, const Mat& dX, const BlockParams* dp) {
  Mat dX1 = attention_jvp(w, f.attn, layernorm_jvp(w.ln1_gamma, f.ln1, dX), AttentionPart::kFull, dp);
  if (sab_residual(f.skip)) dX1 += dX;
  return dX1;
}

Mat sab_vjp(const BlockWeights& w, const BlockForward& f, const Mat& G, BlockParams* gp) {
  Mat gX = layernorm_vjp(w.ln1_gamma, f.ln1, attention_vjp(w, f.attn, G, AttentionPart::kFull, gp));
  if (sab_residual(f.skip)) gX += G;
  return gX;
}

Mat ffn_jvp(const BlockWeights& w, const BlockForward& f, const Mat& gelu_prime, const Mat& dX1,
            const BlockParams* dp) {
  Mat dX2 = mlp_jvp(w, f.mlp, gelu_prime, layernorm_jvp(w.ln2_gamma, f.ln2, dX1), dp);
  if (ffn_residual(f.skip)) dX2 += dX1;
  return dX2;
}

Mat ffn_vjp(const BlockWeights& w, const BlockForward& f, const Mat& gelu_prime, const Mat& G, BlockParams* gp) {
  Mat gX1 = layernorm_vjp(w.ln2_gamma, f.ln2, mlp_vjp(w, f.mlp, gelu_prime, G, gp));
  if (ffn_residual(f.skip)) gX1 += G;
  return gX1;
}

Mat block_jvp(const BlockWeights& w, const BlockForward& f, const Mat& dX, const BlockParams* dp) {
  return ffn_jvp(w, f, mlp_gelu_prime(f.mlp), sab_jvp(w, f, dX, dp), dp);
}

Mat block_vjp(const BlockWeights& w, const BlockForward& f, const Mat& G, BlockParams* gp) {
  return sab_vjp(w, f, ffn_vjp(w, f, mlp_gelu_prime(f.mlp), G, gp), gp);
}

}  // namespace jacond
