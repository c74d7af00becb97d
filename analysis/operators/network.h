// Network-level Jacobians of a stack of pre-norm ViT blocks (Cutting the Skip §4.2–4.3).
//
// A Network is L blocks, each with its own BlockWeights and SkipMode (analysis/jacobians/block.h). For a
// batch of m inputs X^(1..m) ∈ R^{n×d} the stacked output is (paper Eq. 5, token embedding and
// head omitted as in §4.1)
//   F(θ) = [vec f(X^(1); θ); …; vec f(X^(m); θ)] ∈ R^{mnd},   vec column-major (analysis/core/types.h),
// so row r = s·nd + i + a·n of any Jacobian of F is (sample s, token i, feature a).
//
// Parameter vector θ (the trainable weights; LayerNorm γ/β are NOT part of θ, as in the paper's
// θ^(ℓ) = SA parameters, θ̂^(ℓ) = MLP parameters). Blocks in order ℓ = 0..L−1, and per block
//   θ^(ℓ)  (attention, p_ℓ = 4d² + 4d):   vec W^Q, vec W^K, vec W^V, vec W^O, b_Q, b_K, b_V, b_O
//   θ̂^(ℓ) (MLP, p̂_ℓ = 2·d·hidden + hidden + d):  vec W_1, b_1, vec W_2, b_2
// each matrix vec'd column-major in the row-vector convention (W^Q is d×d with Q = Y W^Q, W_1 is
// d×hidden), so entry W(r, c) of a matrix sits at offset r + c·rows inside its slot. The full
//   θ = [θ^(0); θ̂^(0); θ^(1); θ̂^(1); …]   ⇒   J = ∂F/∂θ = [J_0, Ĵ_0, J_1, Ĵ_1, …]     (§4.2)
// A ParamSelection picks any list of these groups, in the order given, as the columns of an
// operator: ParamSelection::all(net) gives J, ::attention(ℓ) gives J_ℓ, ::mlp(ℓ) gives Ĵ_ℓ.
//
// Products (forward mode for J v, reverse mode for Jᵀ u) chain the per-block kernels block_jvp /
// block_vjp of analysis/operators/block_kernels.h (the same kernels as the block operators of
// analysis/operators/operators.h) in the order of the forward pass (X → LN1 → SA → X1 = [X +] SA
// → LN2 → MLP → X2 = [X1 +] MLP); cost O(m·L·(n²d + nd² + nd·hidden)) per product. Operators follow docs/design.md §5
// (rows, cols, perform_op = Jv, perform_op_transpose = Jᵀu) and keep references to the network
// and the forward caches they were built from: keep those alive.
#pragma once

#include <string>
#include <vector>

#include "analysis/core/types.h"
#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/block_kernels.h"
#include "analysis/operators/operators.h"

namespace jacond {

struct Network {
  std::vector<BlockWeights> blocks;
  std::vector<SkipMode> skips;  // one per block

  Index depth() const { return static_cast<Index>(blocks.size()); }
  Index d() const { return blocks.empty() ? 0 : blocks.front().d; }
  /// Throws std::invalid_argument naming the first problem (empty, skips/blocks count, d mismatch, weights).
  void validate() const;
};

enum class ParamGroup { kAttention, kMlp };
std::string to_string(ParamGroup g);  // "attn" | "mlp"

/// p_ℓ = 4d² + 4d (W^Q, W^K, W^V, W^O, b_Q, b_K, b_V, b_O).
Index attention_param_count(const BlockWeights& w);
/// p̂_ℓ = d·hidden + hidden + hidden·d + d (W_1, b_1, W_2, b_2).
Index mlp_param_count(const BlockWeights& w);

struct ParamSlice {
  Index layer = 0;
  ParamGroup group = ParamGroup::kAttention;
};

/// The parameter groups that make up an operator's columns, in column order.
struct ParamSelection {
  std::vector<ParamSlice> slices;
  static ParamSelection all(const Network& net);    // J = [J_0, Ĵ_0, …]
  static ParamSelection attention(Index layer);     // J_ℓ
  static ParamSelection mlp(Index layer);           // Ĵ_ℓ
  Index size(const Network& net) const;             // number of columns
  /// Column offset of each slice (same order), plus the total at the end.
  std::vector<Index> offsets(const Network& net) const;
};

// BlockParams (tangents or gradients of one block's θ, shaped like BlockWeights) is declared in
// analysis/operators/block_kernels.h, next to the kernels that take it.

/// Packs/unpacks one group of a block to/from its slot of θ (layout in the header comment).
void pack_group(const BlockParams& p, ParamGroup g, double* out);
void unpack_group(const double* in, ParamGroup g, BlockParams& p);

/// The trainable parameters of a network as θ (all groups, header order), and the inverse.
Vec network_parameters(const Network& net);
Network with_parameters(const Network& net, const Vec& theta);

// ---------------------------------------------------------------------------------------------
// Forward pass. The per-block tangent / adjoint maps block_jvp / block_vjp are in
// analysis/operators/block_kernels.h.

/// forward[s][ℓ] = block ℓ's caches for sample s; output(s) is the last block's X2.
struct NetworkForward {
  std::vector<std::vector<BlockForward>> samples;
  Index m() const { return static_cast<Index>(samples.size()); }
  const Mat& output(Index s) const { return samples[s].back().X2; }
};

/// Runs all samples through the stack. Throws std::invalid_argument on bad shapes.
NetworkForward network_forward(const Network& net, const std::vector<Mat>& inputs);

/// F(θ) of Eq. 5: the stacked vec outputs, length m·n·d.
Vec network_outputs(const Network& net, const std::vector<Mat>& inputs);

// ---------------------------------------------------------------------------------------------
// Operators (docs/design.md §5).

/// J_sel = ∂F/∂θ_sel ∈ R^{mnd × |sel|} at the cached forward pass.
class ParamJacobianOp {
 public:
  using Scalar = double;
  ParamJacobianOp(const Network& net, const NetworkForward& fwd, ParamSelection sel);
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  void perform_op(const Scalar* x, Scalar* y) const;            // y = J x   (forward mode)
  void perform_op_transpose(const Scalar* x, Scalar* y) const;  // y = Jᵀ x  (reverse mode)
  const ParamSelection& selection() const { return sel_; }

 private:
  const Network& net_;
  const NetworkForward& fwd_;
  ParamSelection sel_;
  std::vector<Index> offsets_;
  Index rows_ = 0, cols_ = 0, first_layer_ = 0;
};

/// ∂vec f(X)/∂vec X ∈ R^{nd×nd} of one sample through the whole stack:
///   ∏_{ℓ=L−1}^{0} K_ffn,ℓ K_sab,ℓ  with K_sab = K̃_sab (+ I), K_ffn = K̃_ffn (+ I)   (Eq. 8 / 9).
class StackInputJacobianOp {
 public:
  using Scalar = double;
  StackInputJacobianOp(const Network& net, const NetworkForward& fwd, Index sample);
  Index rows() const { return N_; }
  Index cols() const { return N_; }
  void perform_op(const Scalar* x, Scalar* y) const;
  void perform_op_transpose(const Scalar* x, Scalar* y) const;

 private:
  const Network& net_;
  const std::vector<BlockForward>& f_;
  Index n_ = 0, N_ = 0;
};

/// Dense matrix of an operator from perform_op (columns) — for small sizes and tests.
template <typename Op>
Mat dense_from_products(const Op& op) {
  return operator_to_dense(op);
}

/// Dense matrix of an operator from perform_op_transpose (rows): cheaper when rows < cols.
template <typename Op>
Mat dense_from_transpose_products(const Op& op) {
  return operator_transpose_to_dense(op).transpose();
}

/// Dense J_sel, built from whichever product route needs fewer products.
Mat param_jacobian_dense(const Network& net, const NetworkForward& fwd, const ParamSelection& sel);

// ---------------------------------------------------------------------------------------------
// Per-layer factors of Eq. 8 / 9 (one sample), dense, from the closed forms of analysis/jacobians/jacobians.h.

struct LayerFactors {
  Mat K_sab;  // ∂X1/∂X  = K_ℓ (+ I when the block's SAB residual is on)      nd × nd
  Mat K_ffn;  // ∂X2/∂X1 = K̂_ℓ (+ I when the block's FFN residual is on)      nd × nd
};
/// factors[ℓ] for block ℓ at sample `sample`'s activations.
std::vector<LayerFactors> layer_factors(const Network& net, const NetworkForward& fwd, Index sample);

/// ∏_{ℓ=L−1}^{0} K_ffn,ℓ K_sab,ℓ from the dense factors (last layer leftmost, as Eq. 8).
Mat stack_input_jacobian_dense(const std::vector<LayerFactors>& factors);

}  // namespace jacond
