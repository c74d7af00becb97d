// Matrices with singular values known by construction, for tests of the spectral routines.
#pragma once

#include <Eigen/QR>
#include <cmath>
#include <random>

#include "support/random_block.h"

namespace jacond::test {

/// U diag(s) Vᵀ (rows × cols, s.size() = min(rows, cols)) with Householder-random (Haar)
/// orthogonal U, V drawn from `seed` (U first, then V).
inline Mat with_singular_values(const Vec& s, Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Mat U = Eigen::HouseholderQR<Mat>(gaussian(rows, rows, 1.0, rng)).householderQ();
  const Mat V = Eigen::HouseholderQR<Mat>(gaussian(cols, cols, 1.0, rng)).householderQ();
  const Index k = s.size();
  return U.leftCols(k) * s.asDiagonal() * V.leftCols(k).transpose();
}

/// n values from 1 down to 1/κ, evenly spaced in log.
inline Vec geometric(Index n, double kappa) {
  Vec s(n);
  for (Index i = 0; i < n; ++i) s(i) = std::pow(kappa, -static_cast<double>(i) / static_cast<double>(n - 1));
  return s;
}

}  // namespace jacond::test
