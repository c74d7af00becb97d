#include "models/data/token_graying.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace jacond::models {

namespace {

void check_input(const torch::Tensor& images, double eps) {
  if (!(eps > 0 && eps <= 1)) throw std::invalid_argument("token graying: --tg-eps must be in (0, 1], got " + std::to_string(eps));
  if (images.dim() < 2) throw std::invalid_argument("token graying: images need at least two dimensions (H, W)");
}

// |v|/m with m the per-matrix maximum (broadcast; m = 0, an all-zero matrix, divides by 1), and
// whether it is above the fp64 noise floor `count`·u. Values at or under it are rounding, not
// content (a matrix's repeated rows give singular values of ~1e-16 σ_max): graying must leave
// them alone, or it lifts rounding to (1e-16)^ε·m and invents directions the image does not have.
struct Relative {
  torch::Tensor ratio, above_floor;
};
Relative relative_to_max(const torch::Tensor& v, const torch::Tensor& m, int64_t count) {
  const torch::Tensor ratio = v.abs() / torch::where(m > 0, m, torch::ones_like(m));
  return {ratio, ratio > static_cast<double>(count) * std::numeric_limits<double>::epsilon()};
}

// σ_max (σ/σ_max)^ε for the singular values S (last dimension); 0 at or under the noise floor.
torch::Tensor power_towards_max(const torch::Tensor& S, double eps, int64_t count) {
  const torch::Tensor smax = std::get<0>(S.max(-1, /*keepdim=*/true));
  const Relative rel = relative_to_max(S, smax, count);
  return torch::where(rel.above_floor, smax * torch::pow(rel.ratio, eps), torch::zeros_like(S));
}

// (r/r_max)^{(ε-1)/2} for the norms r of the rows (or columns) of the DCT coefficients, per matrix
// (r is [..., H, 1] or [..., 1, W]); 1 at or under the noise floor (nothing to amplify).
torch::Tensor equalising_weights(const torch::Tensor& r, double eps, int64_t count) {
  const Relative rel = relative_to_max(r, r.amax({-2, -1}, /*keepdim=*/true), count);
  return torch::where(rel.above_floor, torch::pow(rel.ratio, 0.5 * (eps - 1)), torch::ones_like(r));
}

}  // namespace

TokenGraying parse_token_graying(const std::string& s) {
  if (s == "none") return TokenGraying::kNone;
  if (s == "svd") return TokenGraying::kSvd;
  if (s == "dct") return TokenGraying::kDct;
  throw std::invalid_argument("--token-graying must be none, svd or dct, got '" + s + "'");
}

std::string to_string(TokenGraying mode) {
  switch (mode) {
    case TokenGraying::kNone: return "none";
    case TokenGraying::kSvd: return "svd";
    case TokenGraying::kDct: return "dct";
  }
  return "?";
}

torch::Tensor dct_matrix(int64_t n) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor k = torch::arange(n, opts).unsqueeze(1), j = torch::arange(n, opts).unsqueeze(0);
  torch::Tensor D = torch::cos(M_PI * (2 * j + 1) * k / (2.0 * static_cast<double>(n))) * std::sqrt(2.0 / n);
  D[0].mul_(1.0 / std::sqrt(2.0));  // c_0 = √(1/N)
  return D;
}

namespace {

// D_H X D_Wᵀ (forward) or D_Hᵀ X D_W (inverse) over the last two dimensions, in fp64, as two
// GEMMs over the whole batch: rows of every image times D_Wᵀ, then D_H times the images' columns
// side by side. (A broadcast D_H · X over [B, C, H, W] runs B·C small products and measured ~3×
// slower for a 128-image batch.)
torch::Tensor dct_sandwich(const torch::Tensor& x, bool inverse) {
  const int64_t h = x.size(-2), w = x.size(-1);
  const torch::Tensor Dh = dct_matrix(h).to(x.device()), Dw = dct_matrix(w).to(x.device());
  const torch::Tensor rows = x.to(torch::kFloat64).reshape({-1, w}).matmul(inverse ? Dw : Dw.t());  // [N·H, W]
  const torch::Tensor columns = rows.reshape({-1, h, w}).transpose(0, 1).reshape({h, -1});            // [H, N·W]
  const torch::Tensor both = (inverse ? Dh.t() : Dh).matmul(columns);
  return both.reshape({h, -1, w}).transpose(0, 1).reshape(x.sizes());
}

}  // namespace

torch::Tensor dct2(const torch::Tensor& x) { return dct_sandwich(x, /*inverse=*/false); }
torch::Tensor idct2(const torch::Tensor& x) { return dct_sandwich(x, /*inverse=*/true); }

torch::Tensor svd_token_graying(const torch::Tensor& images, double eps) {
  check_input(images, eps);
  const auto [U, S, Vh] = torch::linalg_svd(images.to(torch::kFloat64), /*full_matrices=*/false);
  const torch::Tensor grayed = power_towards_max(S, eps, std::max(images.size(-2), images.size(-1)));
  return torch::matmul(U * grayed.unsqueeze(-2), Vh).to(images.scalar_type());
}

torch::Tensor dct_token_graying(const torch::Tensor& images, double eps) {
  check_input(images, eps);
  const torch::Tensor C = dct2(images);
  const int64_t count = std::max(images.size(-2), images.size(-1));
  const torch::Tensor a = equalising_weights(torch::linalg_vector_norm(C, 2, {-1}, /*keepdim=*/true), eps, count);
  const torch::Tensor b = equalising_weights(torch::linalg_vector_norm(C, 2, {-2}, /*keepdim=*/true), eps, count);
  return idct2(a * C * b).to(images.scalar_type());
}

torch::Tensor patchify(const torch::Tensor& images, int64_t patch) {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  if (patch < 1 || H % patch != 0 || W % patch != 0)
    throw std::invalid_argument("token graying: patch " + std::to_string(patch) + " does not divide the image");
  return images.reshape({B, C, H / patch, patch, W / patch, patch})
      .permute({0, 2, 4, 1, 3, 5})  // [B, H/p, W/p, C, p, p]
      .reshape({B, (H / patch) * (W / patch), C * patch * patch});
}

torch::Tensor unpatchify(const torch::Tensor& patches, int64_t channels, int64_t height, int64_t width, int64_t patch) {
  const int64_t B = patches.size(0);
  return patches.reshape({B, height / patch, width / patch, channels, patch, patch})
      .permute({0, 3, 1, 4, 2, 5})  // [B, C, H/p, p, W/p, p]
      .reshape({B, channels, height, width});
}

torch::Tensor token_graying(const torch::Tensor& images, TokenGraying mode, double eps, int64_t patch) {
  if (mode == TokenGraying::kNone) return images;
  const torch::Tensor P = patchify(images, patch);
  const torch::Tensor grayed = mode == TokenGraying::kSvd ? svd_token_graying(P, eps) : dct_token_graying(P, eps);
  return unpatchify(grayed, images.size(1), images.size(2), images.size(3), patch);
}

}  // namespace jacond::models
