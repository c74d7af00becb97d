// Dense analytic Jacobians of one ViT block (fp64), in the column-major vec convention of
// analysis/core/types.h: rows index output (token i, feature a) as i + a·n, columns index input
// (token j, feature b) as j + b·n.
//
// Bare self-attention at its input Y (paper Eq. 10 and 13, multi-head, with biases):
//   SA(Y) = Σ_h A_h V_h W^O_h + 1 b_Oᵀ,  W^O_h = rows [h d_h, (h+1) d_h) of W^O,
//   K_sa = B_sa + E_sa with
//   B_sa = Σ_h (W^V_h W^O_h)ᵀ ⊗ A_h                      (the "dominant term", Prop. 2)
//   E_sa = Σ_h (P_hᵀ ⊗ I_n) ∂vec A_h/∂vec Y,   P_h = V_h W^O_h  (the "perturbation term")
// With R_h = A_h P_h and row i of A_h written p (softmax Jacobian diag(p) − p pᵀ), the
// entries of E_sa are, with s the logit scale and U_h = Q_h (W^K_h)ᵀ, Kq_h = K_h (W^Q_h)ᵀ:
//   E[(i,a),(l,b)] += s · A_h[i,l] (P_h[l,a] − R_h[i,a]) · U_h[i,b]              (∂ through K)
//   E[(i,a),(i,b)] += s · Σ_l A_h[i,l] (P_h[l,a] − R_h[i,a]) · Kq_h[l,b]          (∂ through Q)
//
// LayerNorm, per token (x̂ = (x − μ)/σ, σ = sqrt(var + eps)):
//   ∂y/∂x = diag(γ) σ⁻¹ (I − 11ᵀ/d − x̂ x̂ᵀ/d)
// MLP, per token: ∂y/∂x = W_2ᵀ diag(gelu'(x W_1 + b_1)) W_1ᵀ.
#pragma once

#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/core/types.h"

namespace jacond {

/// Which part of K_sa to assemble.
enum class AttentionPart { kFull, kB, kE };

/// A matrix that is block diagonal over tokens: the rows and columns of token i are the
/// vec indices {i + a·n}. blocks[i] is d_out×d_in. The LayerNorm, MLP and FFN Jacobians
/// have this form; its singular values are the union of the blocks' singular values.
struct TokenBlockDiagonal {
  Index n = 0;
  std::vector<Mat> blocks;
  Index rows() const { return blocks.empty() ? 0 : n * blocks[0].rows(); }
  Index cols() const { return blocks.empty() ? 0 : n * blocks[0].cols(); }
  Mat to_dense() const;
};

/// K_sa, B_sa or E_sa of bare attention at the cached input (nd × nd).
Mat attention_jacobian(const BlockWeights& w, const AttentionCache& c, AttentionPart part = AttentionPart::kFull);

/// The columns of attention_jacobian(w, c, part) one at a time, from factors formed once (per head
/// 5 n·d + d² doubles, and the n Q-path blocks D_i, d × d each): what attention_jacobian assembles,
/// bit for bit, and what the host's Schur route (analysis/spectral/schur_lu.h) takes a panel at a
/// time without ever holding K. Column j = l + b·n is ∂ vec SA / ∂ Y[l, b] (jacobians.cpp states
/// its three terms). Holds references to w and c.
class AttentionJacobianColumns {
 public:
  AttentionJacobianColumns(const BlockWeights& w, const AttentionCache& c, AttentionPart part = AttentionPart::kFull);
  ~AttentionJacobianColumns();
  Index order() const { return n_ * d_; }
  /// Column j (N doubles) into `out`.
  void column(Index j, double* out) const;
  /// Columns [first, first + count) into `out` (N × count, column-major, leading dimension N), on
  /// get_threads() threads; std::invalid_argument for a range past the matrix.
  void columns(Index first, Index count, double* out) const;

 private:
  struct HeadFactors;
  Index n_, d_;
  double s_;
  bool with_b_, with_e_;
  std::vector<HeadFactors> heads_;
  std::vector<Mat> D_;  // the Q-path blocks D_i, summed over heads
};

/// The same matrix rounded to fp32, for the mixed route (analysis/spectral/mixed_lu.h): each column
/// computed in fp64 and rounded once, so it equals attention_jacobian(…).cast<float>() exactly,
/// without ever holding the fp64 matrix (4N² bytes at the peak instead of 12N²: ViT-B's K_sa is
/// 92 GB this way, 275 GB the other).
MatF attention_jacobian_fp32(const BlockWeights& w, const AttentionCache& c, AttentionPart part = AttentionPart::kFull);

/// A'_h = ∂vec A_h/∂vec Y of one head (n² × nd; paper Eq. 10), row i + k·n for A_h[i,k]:
///   ∂A[i,k]/∂Y[j,b] = s Σ_l J_i[k,l] (δ_ij Kq[l,b] + δ_lj U[i,b]),  J_i = diag(p_i) − p_i p_iᵀ,
///   Kq = K_h (W^Q_h)ᵀ, U = Q_h (W^K_h)ᵀ.
Mat attention_map_jacobian(const BlockWeights& w, const AttentionCache& c, Index head);

/// LayerNorm Jacobian per token.
TokenBlockDiagonal layernorm_jacobian(const Vec& gamma, const LayerNormCache& c);

/// Bare MLP Jacobian per token, at the cached input.
TokenBlockDiagonal mlp_jacobian(const BlockWeights& w, const MlpCache& c);

/// K_ffn per token: MLP(LN2 X1) (+ I when the MLP residual is on).
TokenBlockDiagonal ffn_jacobian(const BlockWeights& w, const BlockForward& f);

/// K_sab = K_sa(LN1 X) · J_LN1(X) (+ I when the attention residual is on), nd × nd.
Mat sab_jacobian(const BlockWeights& w, const BlockForward& f);

/// Softmax Jacobian of one probability row p: diag(p) − p pᵀ (symmetric, p-weighted).
Mat softmax_row_jacobian(const Vec& p);

/// K · blockdiag_j(blocks[j]) where K has nd columns in vec order and blocks[j] is d×k:
/// the result has n·k columns, column j + b·n built from token j's block. Used for the chain
/// rule through a per-token Jacobian and for restriction to a per-token subspace.
Mat right_multiply_tokenwise(const Mat& K, Index n, const std::vector<Mat>& blocks);

/// Orthonormal basis (d × (d − 2)) of the complement of span{1, x̂} in R^d: the structural
/// (near-)nullspace of the LayerNorm Jacobian of a token (1 exactly; x̂ up to eps/(var+eps)).
Mat layernorm_complement_basis(const Vec& x_hat_row);

/// layernorm_complement_basis of every token (row) of x̂: the C_i that restrict a pre-norm
/// sub-block's input to the `ln-complement` space (right_multiply_tokenwise(K, n, bases)).
std::vector<Mat> layernorm_complement_bases(const Mat& x_hat);

/// Orthonormal basis (n × (n − 1)) of the complement of 1 in R^n: the nullspace of every
/// softmax row Jacobian.
Mat ones_complement_basis(Index n);

}  // namespace jacond
