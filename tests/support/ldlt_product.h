// L D Lᵀ read from an LdltFactors' layout (analysis/spectral/ldlt.h), independently of the code
// that reads it in analysis/spectral/inertia.cpp: L unit lower from F's strict lower triangle (F(i+1, i)
// belongs to D where e(i) marks a 2 × 2 block), D from F's diagonal and e. P L D Lᵀ Pᵀ = H, so its
// eigenvalues are H's up to the factorisation's backward error: a wrong layout (an unconverted
// Bunch–Kaufman L, a subdiagonal of D left in F or lost from e) changes them.
#pragma once

#include <Eigen/Eigenvalues>

#include "analysis/spectral/ldlt.h"

namespace jacond::test {

inline Mat ldlt_product(const LdltFactors& f) {
  const Index M = f.order();
  Mat L = Mat::Identity(M, M), D = Mat::Zero(M, M);
  for (Index j = 0; j < M; ++j) {
    D(j, j) = f.F(j, j);
    const Index first = j + (f.is_2x2(j) ? 2 : 1);
    for (Index i = first; i < M; ++i) L(i, j) = f.F(i, j);
    if (f.is_2x2(j)) D(j + 1, j) = D(j, j + 1) = f.e(j);
  }
  return L * D * L.transpose();
}

/// Eigenvalues of a symmetric S, ascending.
inline Vec sorted_eigenvalues(const Mat& S) {
  return Eigen::SelfAdjointEigenSolver<Mat>(S, Eigen::EigenvaluesOnly).eigenvalues();
}

/// #neg(D) from the layout: one per 2 × 2 block (det < 0, ldlt.h), one per negative 1 × 1 pivot.
inline Index negative_pivots(const LdltFactors& f) {
  Index negative = 0;
  for (Index i = 0; i < f.order(); ++i) {
    if (f.is_2x2(i)) {
      negative += 1;
      ++i;
    } else {
      negative += f.F(i, i) < 0 ? 1 : 0;
    }
  }
  return negative;
}

}  // namespace jacond::test
