// Eigen-only versions of the `timm` and `ours` initialisations of docs/design.md §3, for analysis
// tests (which must not link LibTorch). They follow the recipes, not models/init/init.cpp's RNG
// streams, so the weights differ from `jacond block --init` ones; the structure is the same.
#pragma once

#include <random>

#include "analysis/jacobians/block.h"
#include "support/random_block.h"

namespace jacond::test {

// timm: Linear weights N(0, 0.02²) truncated at ±2 (absolute; never reached at std 0.02),
// biases 0, LayerNorm 1/0.
inline BlockWeights timm_like_block(Index d, Index heads, Index hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  BlockWeights w = BlockWeights::zeros(d, heads, hidden);
  w.Wq = gaussian(d, d, 0.02, rng);
  w.Wk = gaussian(d, d, 0.02, rng);
  w.Wv = gaussian(d, d, 0.02, rng);
  w.Wo = gaussian(d, d, 0.02, rng);
  w.W1 = gaussian(d, hidden, 0.02, rng);
  w.W2 = gaussian(hidden, d, 0.02, rng);
  return w;
}

// Orthonormal columns from the QR of a Gaussian, sign(diag R) fixed.
inline Mat orthonormal(Index rows, Index cols, std::mt19937_64& rng) {
  const Mat G = gaussian(rows, cols, 1.0, rng);
  Eigen::HouseholderQR<Mat> qr(G);
  Mat Q = qr.householderQ() * Mat::Identity(rows, cols);
  const Mat R = qr.matrixQR().topRows(cols).triangularView<Eigen::Upper>();
  for (Index j = 0; j < cols; ++j)
    if (R(j, j) < 0) Q.col(j) *= -1.0;
  return Q;
}

// ours (Cutting the Skip §5): W^V = c U, W^O = c Vᵀ from the SVD of a Gaussian; per head
// T_h = α Z_h + β I, Z ~ N(0, 1/d), W^Q_h = U[:, :d_h] sqrt(S), W^K_h = V[:, :d_h] sqrt(S);
// MLP weights scaled orthogonal (DKS), biases 0, LayerNorm 1/0.
inline BlockWeights ours_like_block(Index d, Index heads, Index hidden, uint64_t seed, double alpha = 2.0,
                                    double beta = 0.6, double c = 3.0) {
  std::mt19937_64 rng(seed);
  BlockWeights w = BlockWeights::zeros(d, heads, hidden);
  {
    Eigen::JacobiSVD<Mat> svd(gaussian(d, d, 1.0, rng), Eigen::ComputeFullU | Eigen::ComputeFullV);
    w.Wv = c * svd.matrixU();
    w.Wo = c * svd.matrixV().transpose();
  }
  const Index dh = d / heads;
  for (Index h = 0; h < heads; ++h) {
    const Mat T = alpha * gaussian(d, d, 1.0 / std::sqrt(static_cast<double>(d)), rng) + beta * Mat::Identity(d, d);
    Eigen::JacobiSVD<Mat> svd(T, Eigen::ComputeFullU | Eigen::ComputeFullV);
    const Vec sq = svd.singularValues().head(dh).cwiseSqrt();
    w.Wq.middleCols(h * dh, dh) = svd.matrixU().leftCols(dh) * sq.asDiagonal();
    w.Wk.middleCols(h * dh, dh) = svd.matrixV().leftCols(dh) * sq.asDiagonal();
  }
  // Torch weight shape out × in; ours row convention stores its transpose (in × out).
  auto dks = [&](Index in, Index out) {
    const Index big = std::max(in, out), small = std::min(in, out);
    Mat O = orthonormal(big, small, rng);  // big × small
    Mat Wt = out >= in ? O : Mat(O.transpose());  // out × in
    Wt *= std::max(std::sqrt(static_cast<double>(out) / in), 1.0);
    return Mat(Wt.transpose());  // in × out
  };
  w.W1 = dks(d, hidden);
  w.W2 = dks(hidden, d);
  return w;
}

}  // namespace jacond::test
