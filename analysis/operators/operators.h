// Matrix-free Jacobian operators (docs/design.md §5, after Spectra's MatOp classes).
//
// Each operator exposes `using Scalar = double`, rows(), cols(), perform_op(x, y) (y = K x)
// and perform_op_transpose(x, y) (y = Kᵀ x), on vectors in the column-major vec convention
// of analysis/core/types.h. Products cost O(n²d + nd²) and never form K. They hold references to
// the weights and forward caches they were built from: keep those alive.
//
// perform_op is a forward-mode product (JVP), perform_op_transpose a reverse-mode product
// (VJP). The block operators are thin wrappers of the kernels of analysis/operators/block_kernels.h
// (the one implementation of the block's chain rule, shared with analysis/operators/network.h),
// written independently of the dense closed forms in analysis/jacobians/jacobians.h, which the
// tests compare them against.
#pragma once

#include <vector>

#include "analysis/core/types.h"
#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/block_kernels.h"

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

/// K_sa (or its B / E part) of bare multi-head attention at the cached input Y (paper Eq. 10/13):
/// attention_jvp / attention_vjp of analysis/operators/block_kernels.h.
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
  Mat apply(const Mat& dY) const { return attention_jvp(w_, c_, dY, part_); }
  Mat apply_transpose(const Mat& G) const { return attention_vjp(w_, c_, G, part_); }

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

/// LayerNorm Jacobian applied per token without forming it (docs/design.md §2): layernorm_jvp / _vjp.
///   ∂y/∂x = diag(γ) σ⁻¹ (I − 11ᵀ/d − x̂ x̂ᵀ/d);  the middle factor is symmetric, so
///   JVP: dy = γ ∘ σ⁻¹ (dx − mean(dx) − x̂ ⟨x̂, dx⟩/d),   VJP: g ↦ σ⁻¹ (g' − mean(g') − x̂ ⟨x̂, g'⟩/d), g' = γ ∘ g.
/// Holds references to γ and the cache (O(nd)).
class LayerNormJacobianOp : public TokenOperator<LayerNormJacobianOp> {
 public:
  LayerNormJacobianOp(const Vec& gamma, const LayerNormCache& c) : gamma_(gamma), c_(c) {}
  Index n_in() const { return c_.x_hat.rows(); }
  Index d_in() const { return c_.x_hat.cols(); }
  Index n_out() const { return c_.x_hat.rows(); }
  Index d_out() const { return c_.x_hat.cols(); }
  Mat apply(const Mat& dX) const { return layernorm_jvp(gamma_, c_, dX); }
  Mat apply_transpose(const Mat& G) const { return layernorm_vjp(gamma_, c_, G); }

 private:
  const Vec& gamma_;
  const LayerNormCache& c_;
};

/// K_mlp, the bare MLP at its input Y = LN2(X1), per token: dy = (dx W_1 ∘ gelu'(pre)) W_2
/// (mlp_jvp / mlp_vjp). Stores gelu'(pre) (n × hidden); never forms the per-token d × d blocks.
class MlpJacobianOp : public TokenOperator<MlpJacobianOp> {
 public:
  MlpJacobianOp(const BlockWeights& w, const MlpCache& c) : w_(w), c_(c), gelu_prime_(mlp_gelu_prime(c)) {}
  Index n_in() const { return gelu_prime_.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return gelu_prime_.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dX) const { return mlp_jvp(w_, c_, gelu_prime_, dX); }
  Mat apply_transpose(const Mat& G) const { return mlp_vjp(w_, c_, gelu_prime_, G); }

 private:
  const BlockWeights& w_;
  const MlpCache& c_;
  Mat gelu_prime_;  // n × hidden
};

/// K_sab = K_sa(LN1 X) · J_LN1 (+ I): the attention sub-block with its pre-norm (sab_jvp / sab_vjp).
class SabJacobianOp : public TokenOperator<SabJacobianOp> {
 public:
  SabJacobianOp(const BlockWeights& w, const BlockForward& f) : w_(w), f_(f) {}
  Index n_in() const { return f_.X.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return f_.X.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dX) const { return sab_jvp(w_, f_, dX); }
  Mat apply_transpose(const Mat& G) const { return sab_vjp(w_, f_, G); }

 private:
  const BlockWeights& w_;
  const BlockForward& f_;
};

/// K_ffn = K_mlp(LN2 X1) · J_LN2 (+ I), applied as dy = ((dx J_LN2ᵀ) W_1 ∘ gelu') W_2 per token
/// (ffn_jvp / ffn_vjp). Stores gelu'(pre) (n × hidden).
class FfnJacobianOp : public TokenOperator<FfnJacobianOp> {
 public:
  FfnJacobianOp(const BlockWeights& w, const BlockForward& f) : w_(w), f_(f), gelu_prime_(mlp_gelu_prime(f.mlp)) {}
  Index n_in() const { return f_.X1.rows(); }
  Index d_in() const { return w_.d; }
  Index n_out() const { return f_.X1.rows(); }
  Index d_out() const { return w_.d; }
  Mat apply(const Mat& dX) const { return ffn_jvp(w_, f_, gelu_prime_, dX); }
  Mat apply_transpose(const Mat& G) const { return ffn_vjp(w_, f_, gelu_prime_, G); }

 private:
  const BlockWeights& w_;
  const BlockForward& f_;
  Mat gelu_prime_;  // n × hidden
};

/// Per-token orthonormal bases C_i (d × (d − 2)) of the complement of span{1, x̂_i}, the
/// structural (near-)nullspace of LayerNorm's Jacobian, kept in factored form: the two
/// Householder reflectors of the QR of [1, x̂_i] (O(nd) memory), so C_i c and C_iᵀ y cost O(d).
/// C_i equals layernorm_complement_basis(x̂_i) (analysis/jacobians/jacobians.h) column for column.
class LayerNormComplement {
 public:
  explicit LayerNormComplement(const Mat& x_hat);
  Index n() const { return static_cast<Index>(qr_.size()); }
  Index d() const { return d_; }
  /// Row i of the result is (C_i Cc.row(i)ᵀ)ᵀ: n × (d − 2) -> n × d.
  Mat expand(const Mat& Cc) const;
  /// Row i of the result is (C_iᵀ Y.row(i)ᵀ)ᵀ: n × d -> n × (d − 2).
  Mat reduce(const Mat& Y) const;
  /// The factored form itself, for a device's twin of expand/reduce: [0 0 | C_i] = Q_i =
  /// (I − τ_i0 v_i0 v_i0ᵀ)(I − τ_i1 v_i1 v_i1ᵀ) (Eigen's HouseholderQR of [1, x̂_i]; v_ik is zero
  /// above entry k and 1 at k). Row i of reflectors(k) is v_ikᵀ (n × d); taus() is n × 2.
  Mat reflectors(Index k) const;
  Mat taus() const;

 private:
  Index d_ = 0;
  std::vector<Eigen::HouseholderQR<Mat>> qr_;
};

/// K · blockdiag_i(C_i): an nd × n(d − 2) operator, the restriction of a token operator's input
/// to the LayerNorm complement (the `ln-complement` space of analysis/report/block_report.h). Input
/// vec index j + b·n is token j, complement coordinate b (as right_multiply_tokenwise).
template <typename Inner>
class LnComplementOp : public TokenOperator<LnComplementOp<Inner>> {
 public:
  LnComplementOp(const Inner& inner, const LayerNormComplement& basis) : inner_(inner), basis_(basis) {}
  Index n_in() const { return basis_.n(); }
  Index d_in() const { return basis_.d() - 2; }
  Index n_out() const { return inner_.n_out(); }
  Index d_out() const { return inner_.d_out(); }
  Mat apply(const Mat& dC) const { return inner_.apply(basis_.expand(dC)); }
  Mat apply_transpose(const Mat& G) const { return basis_.reduce(inner_.apply_transpose(G)); }

 private:
  const Inner& inner_;
  const LayerNormComplement& basis_;
};

/// A dense matrix as an operator (tests, and condition_dense with the lanczos route).
class DenseMatrixOp {
 public:
  using Scalar = double;
  explicit DenseMatrixOp(const Mat& A) : A_(A) {}
  Index rows() const { return A_.rows(); }
  Index cols() const { return A_.cols(); }
  void perform_op(const Scalar* x, Scalar* y) const {
    Eigen::Map<Vec>(y, A_.rows()).noalias() = A_ * Eigen::Map<const Vec>(x, A_.cols());
  }
  void perform_op_transpose(const Scalar* x, Scalar* y) const {
    Eigen::Map<Vec>(y, A_.cols()).noalias() = A_.transpose() * Eigen::Map<const Vec>(x, A_.rows());
  }

 private:
  const Mat& A_;
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
