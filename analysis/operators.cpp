#include "analysis/operators.h"

#include <stdexcept>
#include <string>

namespace jacond {

namespace {
// Softmax row JVP/VJP (the Jacobian diag(p) − p pᵀ is symmetric, so both are the same map):
// out[i,:] = p_i ∘ (in[i,:] − ⟨p_i, in[i,:]⟩).
Mat softmax_rows_apply(const Mat& A, const Mat& in) {
  const Vec inner = (A.array() * in.array()).rowwise().sum();
  return (A.array() * (in.colwise() - inner).array()).matrix();
}
}  // namespace

Mat AttentionJacobianOp::apply(const Mat& dY) const {
  const Index n = c_.Y.rows(), dh = w_.head_dim();
  const double s = w_.effective_logit_scale();
  Mat dHeads = Mat::Zero(n, w_.d);  // d Concat_h(A_h V_h)
  const bool want_b = part_ != AttentionPart::kE, want_e = part_ != AttentionPart::kB;
  const Mat dV = want_b ? Mat(dY * w_.Wv) : Mat();
  Mat dQ, dK;
  if (want_e) {
    dQ = dY * w_.Wq;
    dK = dY * w_.Wk;
  }
  for (Index h = 0; h < w_.heads; ++h) {
    const Mat& A = c_.A[h];
    auto out = dHeads.middleCols(h * dh, dh);
    if (want_b) out.noalias() += A * dV.middleCols(h * dh, dh);
    if (want_e) {
      const Mat dM = s * (dQ.middleCols(h * dh, dh) * c_.K.middleCols(h * dh, dh).transpose() +
                          c_.Q.middleCols(h * dh, dh) * dK.middleCols(h * dh, dh).transpose());
      out.noalias() += softmax_rows_apply(A, dM) * c_.V.middleCols(h * dh, dh);
    }
  }
  return dHeads * w_.Wo;
}

Mat AttentionJacobianOp::apply_transpose(const Mat& G) const {
  const Index n = c_.Y.rows(), dh = w_.head_dim();
  const double s = w_.effective_logit_scale();
  const bool want_b = part_ != AttentionPart::kE, want_e = part_ != AttentionPart::kB;
  const Mat gHeads = G * w_.Wo.transpose();
  Mat gV = Mat::Zero(n, w_.d), gQ = Mat::Zero(n, w_.d), gK = Mat::Zero(n, w_.d);
  for (Index h = 0; h < w_.heads; ++h) {
    const Mat& A = c_.A[h];
    const auto gh = gHeads.middleCols(h * dh, dh);
    if (want_b) gV.middleCols(h * dh, dh).noalias() = A.transpose() * gh;
    if (want_e) {
      const Mat gA = gh * c_.V.middleCols(h * dh, dh).transpose();  // n × n
      const Mat gM = s * softmax_rows_apply(A, gA);
      gQ.middleCols(h * dh, dh).noalias() = gM * c_.K.middleCols(h * dh, dh);
      gK.middleCols(h * dh, dh).noalias() = gM.transpose() * c_.Q.middleCols(h * dh, dh);
    }
  }
  Mat gY = Mat::Zero(n, w_.d);
  if (want_b) gY.noalias() += gV * w_.Wv.transpose();
  if (want_e) gY.noalias() += gQ * w_.Wq.transpose() + gK * w_.Wk.transpose();
  return gY;
}

Mat TokenBlockDiagonalOp::apply(const Mat& dX) const {
  Mat out(J_.n, d_out());
  for (Index i = 0; i < J_.n; ++i) out.row(i).noalias() = dX.row(i) * J_.blocks[i].transpose();
  return out;
}

Mat TokenBlockDiagonalOp::apply_transpose(const Mat& G) const {
  Mat out(J_.n, d_in());
  for (Index i = 0; i < J_.n; ++i) out.row(i).noalias() = G.row(i) * J_.blocks[i];
  return out;
}

Mat LayerNormJacobianOp::project(const Mat& dX) const {
  const double d = static_cast<double>(d_in());
  const Vec mean = dX.rowwise().mean();
  const Vec inner = (c_.x_hat.array() * dX.array()).rowwise().sum() / d;  // ⟨x̂, dx⟩/d per token
  Mat out = dX;
  out.colwise() -= mean;
  out -= (c_.x_hat.array().colwise() * inner.array()).matrix();
  return (out.array().colwise() * c_.inv_sigma.array()).matrix();
}

Mat LayerNormJacobianOp::apply(const Mat& dX) const {
  return (project(dX).array().rowwise() * gamma_.transpose().array()).matrix();
}

Mat LayerNormJacobianOp::apply_transpose(const Mat& G) const {
  return project((G.array().rowwise() * gamma_.transpose().array()).matrix());
}

MlpJacobianOp::MlpJacobianOp(const BlockWeights& w, const MlpCache& c)
    : w_(w), gelu_prime_(c.pre.unaryExpr([](double z) { return gelu_derivative(z); })) {}

Mat MlpJacobianOp::apply(const Mat& dX) const { return (dX * w_.W1).cwiseProduct(gelu_prime_) * w_.W2; }

Mat MlpJacobianOp::apply_transpose(const Mat& G) const {
  return (G * w_.W2.transpose()).cwiseProduct(gelu_prime_) * w_.W1.transpose();
}

SabJacobianOp::SabJacobianOp(const BlockWeights& w, const BlockForward& f)
    : w_(w), f_(f), ln1_(w.ln1_gamma, f.ln1), attn_(w, f.attn) {}

Mat SabJacobianOp::apply(const Mat& dX) const {
  Mat out = attn_.apply(ln1_.apply(dX));
  if (sab_residual(f_.skip)) out += dX;
  return out;
}

Mat SabJacobianOp::apply_transpose(const Mat& G) const {
  Mat out = ln1_.apply_transpose(attn_.apply_transpose(G));
  if (sab_residual(f_.skip)) out += G;
  return out;
}

FfnJacobianOp::FfnJacobianOp(const BlockWeights& w, const BlockForward& f)
    : w_(w), f_(f), ln2_(w.ln2_gamma, f.ln2), mlp_(w, f.mlp) {}

Mat FfnJacobianOp::apply(const Mat& dX) const {
  Mat out = mlp_.apply(ln2_.apply(dX));
  if (ffn_residual(f_.skip)) out += dX;
  return out;
}

Mat FfnJacobianOp::apply_transpose(const Mat& G) const {
  Mat out = ln2_.apply_transpose(mlp_.apply_transpose(G));
  if (ffn_residual(f_.skip)) out += G;
  return out;
}

LayerNormComplement::LayerNormComplement(const Mat& x_hat) : d_(x_hat.cols()) {
  if (d_ < 3) throw std::invalid_argument("LayerNormComplement: need d >= 3, got d=" + std::to_string(d_));
  qr_.reserve(x_hat.rows());
  Mat span(d_, 2);
  for (Index i = 0; i < x_hat.rows(); ++i) {
    span.col(0).setOnes();
    span.col(1) = x_hat.row(i).transpose();  // as layernorm_complement_basis
    qr_.emplace_back(span);
  }
}

// C_i = Q_i[:, 2:], Q_i the full orthogonal factor of the QR of [1, x̂_i].
Mat LayerNormComplement::expand(const Mat& Cc) const {
  Mat out(n(), d_);
  Vec t(d_);
  for (Index i = 0; i < n(); ++i) {
    t.head(2).setZero();
    t.tail(d_ - 2) = Cc.row(i).transpose();
    out.row(i) = (qr_[i].householderQ() * t).transpose();
  }
  return out;
}

Mat LayerNormComplement::reduce(const Mat& Y) const {
  Mat out(n(), d_ - 2);
  for (Index i = 0; i < n(); ++i) {
    const Vec t = qr_[i].householderQ().transpose() * Y.row(i).transpose();
    out.row(i) = t.tail(d_ - 2).transpose();
  }
  return out;
}

}  // namespace jacond
