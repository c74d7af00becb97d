// Tangent (forward mode, JVP) and adjoint (reverse mode, VJP) kernels of one pre-norm ViT block:
// the ONE implementation of the block's chain rule. The matrix-free operators of
// analysis/operators/operators.h (perform_op = JVP, perform_op_transpose = VJP) and the network
// Jacobians of analysis/operators/network.h are thin users of these functions; the dense closed
// forms of analysis/jacobians/jacobians.h are an independent derivation the tests compare against.
//
// Conventions (analysis/core/types.h, docs/design.md §2): tokens are rows, Y ∈ R^{n×d}, Q = Y W^Q
// (row-vector convention); vec is column-major, so ∂vec(Y W)/∂vec Y = Wᵀ ⊗ I_n. For a map
// f: R^{n×d} → R^{n×d'} with Jacobian K = ∂vec f/∂vec Y, a kernel acts on n×d matrices without
// forming K:
//   jvp(dY) = unvec(K vec dY),     vjp(G) = unvec(Kᵀ vec G) = ∂⟨G, f(Y)⟩/∂Y.
// Products cost what the forward pass costs: O(n²d + nd²) for attention, O(nd·hidden) for the
// MLP, O(nd) for LayerNorm.
//
// Parameter tangents. The attention and MLP kernels take an optional BlockParams (the trainable
// weights θ of analysis/operators/network.h; LayerNorm γ/β are not part of θ): the JVP adds the
// effect of the parameter tangents dp to the output tangent, and the VJP ADDS the parameter
// gradients ∂⟨G, f⟩/∂θ to gp. nullptr, or a BlockParams whose group is absent, means inputs only.
//
// The building block everywhere is the affine map of the row-vector convention,
//   lin(Y) = Y W + 1 bᵀ:   tangent dY W + Y dW + 1 dbᵀ;   adjoint G ↦ G Wᵀ, gW += Yᵀ G, gb += Gᵀ 1.
#pragma once

#include "analysis/core/types.h"
#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"

namespace jacond {

/// Tangents (or gradients) of one block's trainable parameters, shaped like BlockWeights.
/// `attn` / `mlp` say which groups are present; absent groups are empty and mean zero.
struct BlockParams {
  bool attn = false, mlp = false;
  Mat Wq, Wk, Wv, Wo;
  Vec bq, bk, bv, bo;
  Mat W1, W2;
  Vec b1, b2;
  static BlockParams zeros(const BlockWeights& w, bool attn, bool mlp);
};

// ---------------------------------------------------------------------------------------------
// LayerNorm, per token (x̂ = (x − μ)/σ, σ = sqrt(var + eps), cache of layernorm_forward):
//   ∂y/∂x = diag(γ) P,   P = σ⁻¹ (I − 11ᵀ/d − x̂ x̂ᵀ/d)   (P symmetric), so
//   JVP: dy = γ ∘ P dx = γ ∘ σ⁻¹ (dx − mean(dx) 1 − x̂ ⟨x̂, dx⟩/d);   VJP: g ↦ P (γ ∘ g).
// In vec form the Jacobian is token block diagonal (rows/columns {i + a·n} of token i).

Mat layernorm_jvp(const Vec& gamma, const LayerNormCache& c, const Mat& dX);
Mat layernorm_vjp(const Vec& gamma, const LayerNormCache& c, const Mat& G);

// ---------------------------------------------------------------------------------------------
// Bare multi-head self-attention at the cached input Y (block.h, paper Eq. 3–4 with biases):
//   Q = lin_Q(Y), K = lin_K(Y), V = lin_V(Y);  M_h = s Q_h K_hᵀ;  A_h = softmax_rows(M_h);
//   SA(Y) = lin_O(H),  H = Concat_h(A_h V_h)   (head h: columns [h d_h, (h+1) d_h)).
// JVP (softmax row Jacobian diag(p) − p pᵀ, applied to every row: dA[i,:] = p ∘ (dm − ⟨p, dm⟩)):
//   dH_h = A_h dV_h                                           (through V: the B part)
//        + softmax'(dM_h) V_h,  dM_h = s (dQ_h K_hᵀ + Q_h dK_hᵀ)  (through A_h: the E part)
//   dSA = dH W^O (+ H dW^O + 1 db_Oᵀ).
// In vec form (paper Eq. 10 and 13, multi-head): K_sa = B_sa + E_sa with
//   B_sa = Σ_h (W^V_h W^O_h)ᵀ ⊗ A_h,   E_sa = Σ_h ((V_h W^O_h)ᵀ ⊗ I_n) ∂vec A_h/∂vec Y.
// VJP (the softmax row Jacobian is symmetric):
//   gH = G W^Oᵀ;  gV_h = A_hᵀ gH_h (B part);  gM_h = s softmax'(gH_h V_hᵀ), gQ_h = gM_h K_h,
//   gK_h = gM_hᵀ Q_h (E part);  gY = gQ W^Qᵀ + gK W^Kᵀ + gV W^Vᵀ  (+ the parameter gradients of lin).
// `part` selects K_sa, B_sa or E_sa. Parameter tangents/gradients need part == kFull (the split is
// one of the input Jacobian); anything else throws std::invalid_argument.

Mat attention_jvp(const BlockWeights& w, const AttentionCache& c, const Mat& dY,
                  AttentionPart part = AttentionPart::kFull, const BlockParams* dp = nullptr);
Mat attention_vjp(const BlockWeights& w, const AttentionCache& c, const Mat& G,
                  AttentionPart part = AttentionPart::kFull, BlockParams* gp = nullptr);

// ---------------------------------------------------------------------------------------------
// Bare MLP at the cached input Y: MLP(Y) = lin_2(gelu(pre)), pre = lin_1(Y). Per token
//   ∂y/∂x = W_2ᵀ diag(gelu'(pre)) W_1ᵀ;
//   JVP: dy = (gelu'(pre) ∘ (dY W_1 (+ Y dW_1 + 1 db_1ᵀ))) W_2 (+ act dW_2 + 1 db_2ᵀ);
//   VJP: gpre = gelu'(pre) ∘ (G W_2ᵀ), gY = gpre W_1ᵀ (gW_2 += actᵀ G, gW_1 += Yᵀ gpre, …).
// `gelu_prime` is mlp_gelu_prime(c), n × hidden: evaluated once by an operator that applies the
// kernel many times.

Mat mlp_gelu_prime(const MlpCache& c);
Mat mlp_jvp(const BlockWeights& w, const MlpCache& c, const Mat& gelu_prime, const Mat& dY,
            const BlockParams* dp = nullptr);
Mat mlp_vjp(const BlockWeights& w, const MlpCache& c, const Mat& gelu_prime, const Mat& G, BlockParams* gp = nullptr);

// ---------------------------------------------------------------------------------------------
// Sub-blocks and the block, at the caches of block_forward (residuals per f.skip):
//   SAB: X1 = [X +] SA(LN1 X),    K_sab = K_sa J_LN1 (+ I);
//   FFN: X2 = [X1 +] MLP(LN2 X1), K_ffn = K_mlp J_LN2 (+ I)   (gelu_prime = mlp_gelu_prime(f.mlp));
//   block: K_block = K_ffn K_sab  (the factor of paper Eq. 8 / 9 per layer).

Mat sab_jvp(const BlockWeights& w, const BlockForward& f, const Mat& dX, const BlockParams* dp = nullptr);
Mat sab_vjp(const BlockWeights& w, const BlockForward& f, const Mat& G, BlockParams* gp = nullptr);
Mat ffn_jvp(const BlockWeights& w, const BlockForward& f, const Mat& gelu_prime, const Mat& dX1,
            const BlockParams* dp = nullptr);
Mat ffn_vjp(const BlockWeights& w, const BlockForward& f, const Mat& gelu_prime, const Mat& G, BlockParams* gp = nullptr);

/// Forward-mode product through one block: d X2 given d X (block input) and parameter
/// tangents dp (nullptr = none).
Mat block_jvp(const BlockWeights& w, const BlockForward& f, const Mat& dX, const BlockParams* dp);

/// Reverse-mode product through one block: returns the input gradient ∂⟨G, X2⟩/∂X and, when gp
/// is non-null, ADDS the parameter gradients ∂⟨G, X2⟩/∂θ of the groups gp->attn / gp->mlp to gp.
Mat block_vjp(const BlockWeights& w, const BlockForward& f, const Mat& G, BlockParams* gp);

}  // namespace jacond
