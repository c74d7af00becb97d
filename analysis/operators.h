// Matrix-free Jacobian operators (DESIGN §5, after Spectra's MatOp classes).
//
// Each operator exposes `using Scalar = double`, rows(), cols(), perform_op(x, y) (y = K x)
// and perform_op_transpose(x, y) (y = Kᵀ x), on vectors in the column-major vec convention
// of analysis/types.h. Products cost O(n²d + nd²) and never form K. They hold references to
// the weights and forward caches they were built from: keep those alive.
//
// perform_op is a forward-mode product (JVP), perform_op_transpose a reverse-mode product
// (VJP); both are written from the chain rule independently of the dense closed forms in
// analysis/jacobians.h, which the tests compare them against.
#pragma once

#include "analysis/block.h"
#include "analysis/jacobians.h"
#include "analysis/types.h"

namespace jacond {

/// Base with the vector plumbing: derived classes implement apply(dX) and apply_transpose(G)
/// on n×d matrices.
template <typename Derived>
class TokenOperator {
 public:
  using Scalar = double;
  Index rows() const { return self().n_out() * self().d_out(); }
  Index cols() const { return self().n_in() * self().d_in(); }
  void perform_op(const Scalar* x, Scalar* y) const {
    const Mat dX = Eigen::Map<const Mat>(x, self().n_in(), self().d_in());
    Eigen::Map<Mat>(y, self().n_out(), self().d_out()) = self().apply(dX);
  }
  void perform_op_transpose(const Scalar* x, Scalar* y) const {
    const Mat G = Eigen::Map<const Mat>(x, self().n_out(), self().d_out());
    Eigen::Map<Mat>(y, self().n_in(), self().d_in()) = self().apply_transpose(G);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

/// K_sa (or its B / E part) of bare multi-head attention at the cached input Y.
///   JVP: dSA = Σ_h (dA_h V_h + A_h dY W^V_h) W^O_h,
///        dA_h[i,:] = p ∘ (dm − ⟨p, dm⟩),  dm = row i of s (dQ_h K_hᵀ + Q_h dK_hᵀ).
class AttentionJacobianOp : public TokenOperator<AttentionJacobianOp> {
 public:
  AttentionJacobianOp(const BlockWeights& w, const AttentionCache& c, AttentionPart part = AttentionPart::kFull)
      : w_(w), c_(c), part_(part) {}
  Index n_in() const { return c_.Y.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return c_.Y.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dY) const;
  Mat apply_transpose(const Mat& G) const;

 private:
  const BlockWeights& w_;
  const AttentionCache& c_;
  AttentionPart part_;
};

/// A per-token linear map (LayerNorm, MLP, FFN Jacobians) applied without assembling the
/// nd × nd matrix: row i of the output is blocks[i] · (row i of the input).
class TokenBlockDiagonalOp : public TokenOperator<TokenBlockDiagonalOp> {
 public:
  explicit TokenBlockDiagonalOp(const TokenBlockDiagonal& J) : J_(J) {}
  Index n_in() const { return J_.n; }
  Index d_in() const { return J_.blocks[0].cols(); }
  Index n_out() const { return J_.n; }
  Index d_out() const { return J_.blocks[0].rows(); }
  Mat apply(const Mat& dX) const;
  Mat apply_transpose(const Mat& G) const;

 private:
  const TokenBlockDiagonal& J_;
};

/// K_sab = K_sa(LN1 X) · J_LN1 (+ I): the attention sub-block with its pre-norm.
class SabJacobianOp : public TokenOperator<SabJacobianOp> {
 public:
  SabJacobianOp(const BlockWeights& w, const BlockForward& f);
  Index n_in() const { return f_.X.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return f_.X.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dX) const;
  Mat apply_transpose(const Mat& G) const;

 private:
  const BlockWeights& w_;
  const BlockForward& f_;
  TokenBlockDiagonal ln1_;
  AttentionJacobianOp attn_;
};

/// K_ffn = K_mlp(LN2 X1) · J_LN2 (+ I), applied as dy = ((dx J_LN2ᵀ) W_1 ∘ gelu') W_2 per token.
class FfnJacobianOp : public TokenOperator<FfnJacobianOp> {
 public:
  FfnJacobianOp(const BlockWeights& w, const BlockForward& f);
  Index n_in() const { return f_.X1.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return f_.X1.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dX) const;
  Mat apply_transpose(const Mat& G) const;

 private:
  const BlockWeights& w_;
  const BlockForward& f_;
  TokenBlockDiagonal ln2_;
  Mat gelu_prime_;  // n × hidden
};

/// Dense matrix of any operator, column by column (for tests and small sizes).
template <typename Op>
Mat operator_to_dense(const Op& op) {
  Mat K(op.rows(), op.cols());
  Vec e = Vec::Zero(op.cols());
  for (Index j = 0; j < op.cols(); ++j) {
    e(j) = 1.0;
    op.perform_op(e.data(), K.col(j).data());
    e(j) = 0.0;
  }
  return K;
}

/// Dense transpose of any operator, built from perform_op_transpose.
template <typename Op>
Mat operator_transpose_to_dense(const Op& op) {
  Mat Kt(op.cols(), op.rows());
  Vec e = Vec::Zero(op.rows());
  for (Index j = 0; j < op.rows(); ++j) {
    e(j) = 1.0;
    op.perform_op_transpose(e.data(), Kt.col(j).data());
    e(j) = 0.0;
  }
  return Kt;
}

}  // namespace jacond
