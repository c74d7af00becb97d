// The contract of a KrylovBasis (analysis/operators/krylov_basis.h), checked against plain dense
// algebra on a random operator: every implementation (the host's; a device's twin) runs it.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/QR>

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "analysis/operators/krylov_basis.h"
#include "support/random_block.h"

namespace jacond::test {

// A standard Gaussian matrix of its own seed (support/random_block.h's gaussian).
inline Mat random_matrix(Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return gaussian(rows, cols, 1.0, rng);
}

/// Runs every operation of a basis of `space` once against its dense meaning, A being the
/// space's operator assembled (rows × cols, cols ≥ 9), to `tol` relative to the numbers involved
/// (~1e-13 for fp64 anywhere: the same math, rounded in another order).
inline void check_krylov_basis_contract(const KrylovSpace& space, const Mat& A, double tol) {
  ASSERT_EQ(space.rows, A.rows());
  ASSERT_EQ(space.cols, A.cols());
  const Index m = A.rows(), n = A.cols(), k = 8;
  ASSERT_GE(n, k + 1);
  std::unique_ptr<KrylovBasis> basis = space.make_basis(k);
  // Orthonormal columns to start from: P (n × (k+1)), Q (m × k).
  const Mat P = Eigen::HouseholderQR<Mat>(random_matrix(n, k + 1, 2)).householderQ() * Mat::Identity(n, k + 1);
  const Mat Q = Eigen::HouseholderQR<Mat>(random_matrix(m, k, 3)).householderQ() * Mat::Identity(m, k);
  for (Index j = 0; j <= k; ++j) basis->set_column(KrylovSide::kRight, j, P.col(j));
  for (Index j = 0; j < k; ++j) basis->set_column(KrylovSide::kLeft, j, Q.col(j));
  const double scale = std::max(1.0, A.norm());  // products carry ‖A‖'s rounding
  const auto near = [tol, scale](const Vec& got, const Vec& want) {
    return (got - want).norm() <= tol * scale * std::max(1.0, want.norm());
  };
  const auto unit = [](Index len, Index i) { return Vec(Vec::Unit(len, i)); };

  // combination: V_kk c.
  const Vec c = random_matrix(5, 1, 4).col(0);
  EXPECT_TRUE(near(basis->combination(KrylovSide::kRight, 5, c), P.leftCols(5) * c));
  EXPECT_TRUE(near(basis->combination(KrylovSide::kLeft, 5, c), Q.leftCols(5) * c));

  // apply: K x and Kᵀ x of host vectors.
  const Vec x = random_matrix(n, 1, 5).col(0), y = random_matrix(m, 1, 6).col(0);
  EXPECT_TRUE(near(basis->apply(false, x), A * x));
  EXPECT_TRUE(near(basis->apply(true, y), A.transpose() * y));

  // product + orthogonalise + work_norm + store: the left step of GKL at j = 3, read back through
  // combination. CGS2 leaves w ⟂ Q_3 and returns Q_3ᵀ (K p_3).
  ASSERT_TRUE(basis->product(KrylovSide::kRight, 3));
  const Vec w = A * P.col(3);
  const Vec coeffs = basis->orthogonalise(KrylovSide::kLeft, 3);
  EXPECT_TRUE(near(coeffs, Q.leftCols(3).transpose() * w));
  const Vec w_perp = w - Q.leftCols(3) * (Q.leftCols(3).transpose() * w);
  const double alpha = basis->work_norm(KrylovSide::kLeft);
  EXPECT_NEAR(alpha, w_perp.norm(), tol * scale * w.norm());
  basis->store(KrylovSide::kLeft, 3, alpha);
  const Vec q3 = basis->combination(KrylovSide::kLeft, 4, unit(4, 3));
  EXPECT_TRUE(near(q3, w_perp / w_perp.norm()));
  EXPECT_LE((Q.leftCols(3).transpose() * q3).norm(), tol * scale);
  // The right step's product: Kᵀ q_3, against P_4.
  ASSERT_TRUE(basis->product(KrylovSide::kLeft, 3));
  const Vec z = A.transpose() * q3;
  EXPECT_TRUE(near(basis->orthogonalise(KrylovSide::kRight, 4), P.leftCols(4).transpose() * z));
  // set_work then orthogonalise against no columns: the vector itself.
  basis->set_work(KrylovSide::kRight, x);
  EXPECT_EQ(basis->orthogonalise(KrylovSide::kRight, 0).size(), 0);
  EXPECT_NEAR(basis->work_norm(KrylovSide::kRight), x.norm(), tol * x.norm());

  // restart: P_ℓ ← P_kk V_sel, p_{ℓ+1} ← p_{kk+1}, Q_ℓ ← Q_kk U_sel.
  Mat P_now = P, Q_now = Q;
  Q_now.col(3) = q3;
  const Index kk = 6, l = 2;
  const Mat V_sel = random_matrix(kk, l, 7), U_sel = random_matrix(kk, l, 8);
  basis->restart(kk, V_sel, U_sel);
  const Mat P_want = P_now.leftCols(kk) * V_sel, Q_want = Q_now.leftCols(kk) * U_sel;
  for (Index i = 0; i < l; ++i) {
    EXPECT_TRUE(near(basis->combination(KrylovSide::kRight, l + 1, unit(l + 1, i)), P_want.col(i))) << i;
    EXPECT_TRUE(near(basis->combination(KrylovSide::kLeft, l, unit(l, i)), Q_want.col(i))) << i;
  }
  EXPECT_TRUE(near(basis->combination(KrylovSide::kRight, l + 1, unit(l + 1, l)), P_now.col(kk)));

  // A product with NaN in it is reported, not passed on.
  basis->set_column(KrylovSide::kRight, 0, Vec::Constant(n, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(basis->product(KrylovSide::kRight, 0));
}

}  // namespace jacond::test
