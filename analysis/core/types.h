// Basic types and the vec convention shared by all of analysis/.
//
// Conventions (docs/design.md §2):
//   * Tokens X ∈ R^{n×d}, row-vector convention: Q = X W^Q with W^Q ∈ R^{d×d}.
//   * vec is column-major (Eigen's default): vec(X)[i + a·n] = X(i, a). Hence
//     ∂vec(X W)/∂vec(X) = Wᵀ ⊗ I_n, as in the paper's Eq. 12–13.
//   * A Jacobian K = ∂vec f/∂vec X has row index i + a·n (output token i, feature a) and
//     column index j + b·n (input token j, feature b).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <string>

namespace jacond {

using Index = Eigen::Index;
using Mat = Eigen::MatrixXd;
using Vec = Eigen::VectorXd;
using RowVec = Eigen::RowVectorXd;
/// fp32 twins, for the mixed-precision route only (analysis/spectral/mixed_lu.h): the analysis is fp64.
using MatF = Eigen::MatrixXf;
using VecF = Eigen::VectorXf;

/// vec(X): column-major flattening of an n×d matrix into R^{nd}.
inline Vec vec(const Mat& X) { return Eigen::Map<const Vec>(X.data(), X.size()); }

/// Inverse of vec: reshape x ∈ R^{nd} into an n×d matrix (column-major).
inline Mat unvec(const Vec& x, Index n, Index d) { return Eigen::Map<const Mat>(x.data(), n, d); }

/// Row index in vec(X) of entry (token i, feature a).
inline Index vec_index(Index i, Index a, Index n) { return i + a * n; }

/// True when every entry is finite (no NaN, no ±inf).
template <typename Derived>
bool all_finite(const Eigen::DenseBase<Derived>& m) {
  return m.allFinite();
}

}  // namespace jacond
