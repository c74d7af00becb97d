// One pre-norm Vision Transformer block in fp64, row-vector convention (docs/design.md §2):
//
//   SAB:  X1 = [X +] SA(LN1(X))            SA(Y) = Concat_h(A_h V_h) W^O + 1 b_Oᵀ     (paper Eq. 3–4)
//   FFN:  X2 = [X1 +] MLP(LN2(X1))         MLP(Y) = GELU(Y W_1 + 1 b_1ᵀ) W_2 + 1 b_2ᵀ
//
//   Q = Y W^Q + 1 b_Qᵀ,  K = Y W^K + 1 b_Kᵀ,  V = Y W^V + 1 b_Vᵀ
//   head h uses columns [h·d_h, (h+1)·d_h) of Q, K, V and rows [h·d_h, (h+1)·d_h) of W^O;
//   M_h = s · Q_h K_hᵀ (s = logit_scale, 1/sqrt(d_h) by default), A_h = softmax_rows(M_h).
//   LN(x) = γ ∘ (x − μ)/sqrt(var + eps) + β per token, biased variance, eps = 1e-6.
//   GELU is the exact one: gelu(z) = z·Φ(z) = ½ z (1 + erf(z/√2)).
//
// The residual on each sub-block is switched by SkipMode (the paper's "skip" vs "skipless").
#pragma once

#include <string>
#include <vector>

#include "analysis/core/types.h"

namespace jacond {

/// Which residual connections are present. `kFull`: both; `kNone`: neither (skipless);
/// `kSab`: attention residual only (spelled "no-ffn-skip", the paper's "w/o FFN skip"); `kFfn`: MLP
/// residual only ("no-sab-skip", "w/o SAB skip"). The model's SkipKind
/// (models/vit/vit.h) is these four plus ReZero, mapped here by models::analysis_skip_mode.
enum class SkipMode { kNone, kFull, kSab, kFfn };
inline constexpr SkipMode kSkipModes[] = {SkipMode::kNone, SkipMode::kFull, SkipMode::kSab, SkipMode::kFfn};

/// The spellings are to_string's: "none" | "full" | "no-ffn-skip" | "no-sab-skip"; the earlier
/// "sab" (= no-ffn-skip: the attention residual kept) and "ffn" (= no-sab-skip) are still read.
/// Throws std::invalid_argument listing the current ones.
SkipMode parse_skip_mode(const std::string& s);
std::string to_string(SkipMode m);
inline bool sab_residual(SkipMode m) { return m == SkipMode::kFull || m == SkipMode::kSab; }
inline bool ffn_residual(SkipMode m) { return m == SkipMode::kFull || m == SkipMode::kFfn; }

/// Weights of one block in the paper's row-vector convention (y = x W + b). The conversion
/// from timm/LibTorch Linear (weight = Wᵀ, out×in) happens in models/track/bridge.h, nowhere else.
struct BlockWeights {
  Index d = 0;           // embedding dimension
  Index heads = 1;       // number of heads h, d_h = d / h
  Index hidden = 0;      // MLP hidden width (4d in ViT)
  double logit_scale = 0.0;  // s; 0 means "use 1/sqrt(d_h)" (see effective_logit_scale)
  double ln_eps = 1e-6;

  Vec ln1_gamma, ln1_beta;     // d
  Mat Wq, Wk, Wv, Wo;          // d×d
  Vec bq, bk, bv, bo;          // d
  Vec ln2_gamma, ln2_beta;     // d
  Mat W1;                      // d×hidden
  Vec b1;                      // hidden
  Mat W2;                      // hidden×d
  Vec b2;                      // d

  Index head_dim() const { return d / heads; }
  double effective_logit_scale() const;

  /// Throws std::invalid_argument naming the first problem (shape, divisibility, NaN/inf).
  void validate() const;

  /// A block with all shapes set, identity LayerNorms, zero biases and zero weights.
  static BlockWeights zeros(Index d, Index heads, Index hidden);
};

// ---------------------------------------------------------------------------------------------
// Forward passes with caches (everything a Jacobian needs later).

struct LayerNormCache {
  Mat x_hat;      // n×d, (x − μ)/σ per token
  Vec inv_sigma;  // n, 1/sqrt(var + eps)
  Mat y;          // n×d, γ ∘ x_hat + β
};
LayerNormCache layernorm_forward(const Mat& X, const Vec& gamma, const Vec& beta, double eps);

struct AttentionCache {
  Mat Y;                 // n×d input of the attention
  Mat Q, K, V;           // n×d (with biases)
  std::vector<Mat> A;    // per head, n×n row-stochastic attention maps
  Mat heads_out;         // n×d, Concat_h(A_h V_h)
  Mat out;               // n×d, SA(Y)
};
AttentionCache attention_forward(const BlockWeights& w, const Mat& Y);

struct MlpCache {
  Mat Y;        // n×d input
  Mat pre;      // n×hidden, Y W_1 + b_1
  Mat act;      // n×hidden, gelu(pre)
  Mat out;      // n×d
};
MlpCache mlp_forward(const BlockWeights& w, const Mat& Y);

struct BlockForward {
  SkipMode skip = SkipMode::kNone;
  Mat X;                  // block input
  LayerNormCache ln1;     // LN1(X)
  AttentionCache attn;    // SA(LN1 X)
  Mat X1;                 // after the SAB
  LayerNormCache ln2;     // LN2(X1)
  MlpCache mlp;           // MLP(LN2 X1)
  Mat X2;                 // block output
};
BlockForward block_forward(const BlockWeights& w, const Mat& X, SkipMode skip);
/// Only X and the attention at X itself (no LayerNorm, nothing after): what the attention's
/// Jacobians K_sa, B_sa, E_sa read, e.g. in a post-norm block, where the attention sees its input.
BlockForward attention_only_forward(const BlockWeights& w, const Mat& X);

/// Exact GELU and its derivative.
double gelu(double z);
double gelu_derivative(double z);

/// Row-wise softmax of M (numerically stable: subtract the row max).
Mat softmax_rows(const Mat& M);

}  // namespace jacond
