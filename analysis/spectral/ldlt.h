// The symmetric indefinite factorisation H = P L D Lᵀ Pᵀ that the inertia counts read
// (analysis/spectral/inertia.h), and the two pivotings that produce it.
//
// Layout: LAPACK dsytrf_rk's with uplo 'L', the one every reader here uses.
//   F   column-major M × M: L (unit lower triangular) strictly below the diagonal, D's diagonal on it;
//   e   D's subdiagonal: e(i) ≠ 0 marks a 2 × 2 block at (i, i+1), and then F(i+1, i) = 0 (that
//       entry belongs to D, not L);
//   ipiv the interchanges that make P, as dsytrs_3 reads them.
// The count (#neg D: Sylvester), the rounding radius (|L||D||Lᵀ|) and the solves (dsytrs_3) all
// read this layout, whatever factorised H.
//
// Two pivotings:
//   rook (LAPACKE dsytrf_rk), the host's. |L| is bounded by 1/α ≈ 1.56 entrywise.
//   Bunch–Kaufman (LAPACK dsytrf; cuSOLVER's cusolverDnDsytrf, the only LDLᵀ cuSOLVER has). It
//     stores L as the product of its elimination steps, each with its own interchange;
//     LAPACK's dsyconvf (way 'C') applies the later interchanges to the earlier columns and moves
//     D's subdiagonal into e: the layout above, in place, O(M²) (and one sign of ipiv per 2 × 2
//     block, which dsyconvf writes as dsytrs_3 does not read it: ldlt.cpp). Under BK's partial pivoting L's
//     entries are not bounded. They enter the rounding radius δ of inertia.h only through
//     ρ(|L||D||Lᵀ|) (Higham's Thm 11.3 holds for the diagonal pivoting method with any pivoting),
//     so a large L widens δ and never makes a count wrong.
// Both pivotings give 2 × 2 pivots of negative determinant, which inertia.h's count relies on.
// Rook: |ac| < α²b². BK: a 2 × 2 pivot [a₁₁ a_r1; a_r1 a_rr] is taken when |a₁₁|·σ < α·λ² and
// |a_rr| < α·σ (λ = |a_r1|, the largest off-diagonal of column 1; σ that of column r), so
// |a₁₁ a_rr| < α²λ² ≈ 0.41 λ², and det = a₁₁a_rr − λ² < 0.
//
// Where the factorisation runs is a DenseDevice's choice (analysis/spectral/dense_device.h: ldlt);
// the GPU's (analysis/cuda/dense_cuda.h) is Bunch–Kaufman on the device, its factors converted on
// the host for the count and the radius, its solves on the device. `ldlt_bunch_kaufman` here is
// the host twin of that route, so CI runs every host-side step of it (the conversion above all).
// Guarded by tests/analysis/spectral/test_inertia.cpp (LdltLayout.*): for both pivotings, the
// eigenvalues of L D Lᵀ, read from the layout, are H's within δ; the count equals the dense SVD's;
// H⁻¹H x = x through solve; certificates through the Bunch–Kaufman twin contain the dense σ's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/core/types.h"

namespace jacond {

/// LAPACK's integer (lapack_int of this build's LAPACKE: 32-bit, checked in ldlt.cpp).
using LapackInt = int;

/// H = P L D Lᵀ Pᵀ in the layout of the header, and solves through it.
class LdltFactors {
 public:
  virtual ~LdltFactors() = default;
  Index order() const { return F.rows(); }
  /// True when e(i) marks a 2 × 2 block of D at (i, i+1).
  bool is_2x2(Index i) const { return i + 1 < order() && e(i) != 0.0; }
  /// y = H⁻¹ x (x, y of length order(); may alias). The host's: LAPACKE dsytrs_3 on F, e, ipiv;
  /// a device keeps its own copy of the factors and solves there.
  virtual void solve(const double* x, double* y) const;

  Mat F;
  Vec e;
  std::vector<LapackInt> ipiv;
  bool zero_pivot = false;     // D had an exactly zero pivot (LAPACK info > 0): H singular in working precision
  std::string where = "cpu";   // the device that factorised H ("cpu", "cuda")
  std::string pivoting;        // "rook" or "bunch-kaufman"
};

/// H's lower triangle (`lower`, M × M; the strict upper triangle is not read) factorised on the
/// host by rook pivoting (LAPACKE dsytrf_rk). Throws LapackError on an argument error.
std::unique_ptr<LdltFactors> ldlt_rook(Mat lower);

/// The same by Bunch–Kaufman pivoting (LAPACKE dsytrf), converted to the layout (dsyconvf): the
/// host twin of the GPU's route.
std::unique_ptr<LdltFactors> ldlt_bunch_kaufman(Mat lower);

/// Rewrites Bunch–Kaufman factors in dsytrf's layout (f's lower triangle and ipiv, from LAPACK
/// dsytrf or cusolverDnDsytrf with uplo lower) into the header's layout, in place, filling f.e.
/// Throws LapackError if dsyconvf reports an argument error.
void bunch_kaufman_to_rk_layout(LdltFactors& f);

}  // namespace jacond
