// Matrices with singular values known by construction, for tests of the spectral routines.
#pragma once

#include <Eigen/QR>
#include <Spectra/Util/SimpleRandom.h>
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

/// A = U diag(s) Vᵀ (n = 100) with σ_max = 2, the rest linspace(1, 0.5) and σ_min = 1/kmin, whose
/// right singular vector of σ = s(1) is Spectra's fixed start vector (SimpleRandom(0), the one
/// SymEigsSolver::init() uses), the vectors of σ_max and σ_min orthogonal to it (a review's
/// construction). Lanczos on AᵀA from that start breaks down at once, and Spectra returned σ_max
/// 2.0396 for a true 2 with status Successful (lu_lanczos.h, "The σ_max check").
inline Mat spectra_start_adversary(double kmin) {
  const Index n = 100;
  Spectra::SimpleRandom<double> start(0);
  Vec r0 = start.random_vec(n);
  r0.normalize();
  std::mt19937_64 g(3);
  Mat M = gaussian(n, n, 1.0, g);
  M.col(0) = r0;  // QR keeps r0 as the first direction, the others orthogonal to it
  const Mat Q = Eigen::HouseholderQR<Mat>(M).householderQ();
  Mat V(n, n);
  V.col(0) = Q.col(1);      // σ_max's, orthogonal to r0
  V.col(n - 1) = Q.col(2);  // σ_min's, orthogonal to r0
  V.col(1) = Q.col(0);      // ±r0
  for (Index i = 2; i < n - 1; ++i) V.col(i) = Q.col(i + 1);
  const Mat U = Eigen::HouseholderQR<Mat>(gaussian(n, n, 1.0, g)).householderQ();
  Vec s = Vec::LinSpaced(n, 1.0, 0.5);
  s(0) = 2.0;
  s(n - 1) = 1.0 / kmin;
  return U * s.asDiagonal() * V.transpose();
}

}  // namespace jacond::test
