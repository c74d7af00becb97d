// Token Graying ("Always Skip Attention", Ji et al. ICCV 2025, §5): condition the input image
// before the patch embedding, so the tokens the first block sees are better conditioned.
//
// Which matrix. The paper grays "the token matrix X" (n × d, SVD cost O(nd·min(n, d))) "prior to
// patch embedding": the matrix of the image's patches, one row per patch (n = (H/p)(W/p) rows of
// C·p² pixels, flattened in (C, p, p) order as the patch embedding's weight). That is what
// token_graying() grays, so the patch embedding (linear in that matrix) receives tokens whose
// pixel matrix has κ^ε. (Graying each channel as an H × W matrix, which we did first, does not
// lower κ of the tokens the first block sees: measured, ln κ(X_in) went up at init.)
//
// SVD-TG. Per patch matrix X with SVD X = U Σ Vᵀ:
//     TG(X) = σ_max · U (Σ/σ_max)^ε Vᵀ,        ε ∈ (0, 1]
// The paper writes U (Σ/σ_max)^ε Vᵀ; the factor σ_max keeps the image's scale (its largest
// singular value), so ε = 1 is the identity and the network sees inputs of the usual magnitude.
// Every nonzero singular value moves towards σ_max: κ(TG(X)) = κ(X)^ε (zero ones stay zero; so do
// those at the fp64 noise floor max(H, W)·u·σ_max, which are rounding, not content).
//
// DCT-TG. The paper gives only "X̂ = D X Dᵀ, amplification in the frequency domain, then IDCT".
// We read "amplification" as SVD-TG's power law applied in the DCT basis instead of the singular
// one: with X̂ = D_H X D_Wᵀ, r_k = ‖X̂_{k,:}‖ (energy of vertical frequency k), c_l = ‖X̂_{:,l}‖,
//     X̂' = diag(a) X̂ diag(b),   a_k = (r_k/r_max)^{(ε-1)/2},   b_l = (c_l/c_max)^{(ε-1)/2},
//     TG(X) = D_Hᵀ X̂' D_W,
// with D_N the orthonormal DCT-II matrix, (D_N)_kj = c_k cos(π(2j + 1)k / 2N), c_0 = √(1/N),
// c_k = √(2/N); rows or columns at or under the noise floor max(H, W)·u of the largest are left
// unscaled (a_k = 1), as SVD-TG leaves rounding-level singular values alone.
// Why this rule:
//  - Exact where the DCT is the singular basis: if X̂ has one nonzero σ per row and per column (a
//    scaled permutation; X = D_Hᵀ P Σ D_W), then r_k = c_l = σ for that entry, it becomes
//    σ_max (σ/σ_max)^ε, and DCT-TG equals SVD-TG (tested). For images the DCT approximates the
//    singular vectors (it is the asymptotic Karhunen–Loève basis of first-order Markov signals).
//  - Rank- and structure-preserving: TG(X) = A X B with A = D_Hᵀ diag(a) D_H and B likewise,
//    both symmetric positive definite, so zero singular values stay zero and repeated background
//    rows stay repeated. The first rule tried, the power law on each coefficient's magnitude,
//    broke that: on Fashion-MNIST it *raised* the median ln κ from 5.98 to 11.0 at ε = 0.95.
//  - One knob, the same fixed point (ε = 1 is the identity) and σ_max-scale as SVD-TG, cost two
//    small GEMMs per side per image (O(HW(H + W)); at 28 × 28 a matrix DCT beats an FFT).
// What it does not do: reach SVD-TG's κ. Where the DCT basis is not the singular basis, energy of
// large singular values leaks into every frequency, so the weakest frequencies are not as weak as
// σ_min and get less amplification. Measured on the patch matrices (p = 4: 49 × 16) of the first
// 200 normalised Fashion-MNIST test images (median ln κ over the nonzero singular values, 4.62
// ungrayed), ε = 0.9 / 0.7 / 0.5 give 4.38 / 3.93 / 3.51 (SVD-TG: 4.16 / 3.23 / 2.31), and κ drops
// for every one of the 200.
//
// svd_/dct_token_graying act on the last two dimensions of any batch of matrices (computed in fp64,
// returned in the input's dtype); token_graying() applies one to the patch matrices of a float
// [B, C, H, W] image batch, for every batch the network sees: training (after augmentation),
// evaluation, the tracking probe and `jacond audit`'s probe.
#pragma once

#include <string>

#include <torch/torch.h>

namespace jacond::models {

enum class TokenGraying { kNone, kSvd, kDct };

/// "none" | "svd" | "dct"; std::invalid_argument naming the value otherwise.
TokenGraying parse_token_graying(const std::string& s);
std::string to_string(TokenGraying mode);

/// The orthonormal DCT-II matrix D_n (n × n, fp64): y = D x is the DCT-II of x, x = Dᵀ y its inverse.
torch::Tensor dct_matrix(int64_t n);
/// 2-D DCT-II over the last two dimensions (D_H X D_Wᵀ) and its inverse, in fp64.
torch::Tensor dct2(const torch::Tensor& x);
torch::Tensor idct2(const torch::Tensor& x);

/// SVD-TG and DCT-TG as above on the last two dimensions; eps in (0, 1] (std::invalid_argument
/// otherwise). An all-zero matrix is returned unchanged.
torch::Tensor svd_token_graying(const torch::Tensor& matrices, double eps);
torch::Tensor dct_token_graying(const torch::Tensor& matrices, double eps);

/// [B, C, H, W] -> [B, n, C·p·p]: row i is patch i of the grid (row-major), flattened in (C, p, p)
/// order, so conv2d(images, W, stride p) = patchify(images) · W.view(d, -1)ᵀ. p must divide H and W.
torch::Tensor patchify(const torch::Tensor& images, int64_t patch);
/// The inverse: [B, n, C·p·p] -> [B, C, H, W].
torch::Tensor unpatchify(const torch::Tensor& patches, int64_t channels, int64_t height, int64_t width, int64_t patch);
/// The run's Token Graying of an image batch: each image's patch matrix grayed by `mode`, the pixels
/// put back (kNone: `images` itself).
torch::Tensor token_graying(const torch::Tensor& images, TokenGraying mode, double eps, int64_t patch);

}  // namespace jacond::models
