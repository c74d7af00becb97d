// Token Graying ("Always Skip Attention", Ji et al. ICCV 2025, §5): condition the input image
// before the patch embedding, so the tokens the first block sees are better conditioned.
//
// SVD-TG. Per image and channel X ∈ R^{H×W} with SVD X = U Σ Vᵀ:
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
// σ_min and get less amplification. Measured on the first 200 normalised Fashion-MNIST test images
// (median ln κ over the nonzero singular values, 5.98 ungrayed), ε = 0.9 / 0.7 / 0.5 give
// 5.72 / 5.21 / 4.72 (SVD-TG: 5.38 / 4.18 / 2.99); κ drops for every one of the 200 images, and
// DCT-TG saturates near ln κ ≈ 3.95 as ε → 0, where SVD-TG goes to 0.
// Both act on float [B, C, H, W] batches (computed in fp64, returned in the input's dtype) and on
// every batch the network sees: training (after augmentation), evaluation, the tracking probe and
// `jacond audit`'s probe.
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

/// SVD-TG and DCT-TG as above; eps in (0, 1] (std::invalid_argument otherwise). An all-zero
/// image or channel is returned unchanged.
torch::Tensor svd_token_graying(const torch::Tensor& images, double eps);
torch::Tensor dct_token_graying(const torch::Tensor& images, double eps);
/// The mode's transform (kNone: `images` itself).
torch::Tensor token_graying(const torch::Tensor& images, TokenGraying mode, double eps);

}  // namespace jacond::models
