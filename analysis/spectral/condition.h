// Condition numbers with the numerical contract of docs/design.md §4.
//
// Every κ carries: matrix name, shape, dtype, method, σ_max, σ_min, κ, numerical rank at
// tolerance tol = max(rows, cols)·eps·σ_max, and a status:
//   exact         dense fp64 (LAPACKE gesdd, or the LU/QR + Lanczos route below)
//   certified     κ ∈ [kappa_lo, kappa_hi] with both assumption-bearing ends (σ_min's lower,
//                 σ_max's upper) proven by inertia counts (analysis/spectral/inertia.h, issue #10)
//   bracket       matrix-free; κ ∈ [kappa_lo, kappa_hi]          (issue #4)
//   singular      σ_min ≤ tol: κ is only known to be ≥ kappa_lo = σ_max / tol; kappa = inf
//   not-converged iterations exhausted
//
// Two exact dense routes:
//   * condition_svd: all singular values, LAPACKE_dgesdd (values only), O(8/3 N³) with half
//     of it in BLAS-2 bidiagonalisation.
//   * condition_fast: σ_max by Lanczos on AᵀA (mat-vecs), σ_min by Lanczos on (AᵀA)⁻¹ applied
//     through an LU factorisation (square) or the R of a QR (tall): LU costs 2/3 N³ in BLAS-3.
//     Backward stability of the solves gives σ_min with absolute error O(eps·σ_max), the same
//     as the SVD; Lanczos stops at relative residual 1e-13 on the eigenvalues 1/σ², so both
//     ends are correct to ~1e-12 relative when σ_min is above the noise floor. Where pivot
//     growth (or Spectra) breaks that, σ_min falls below its Ritz vector's ‖A v‖ and the SVD
//     answers instead (analysis/spectral/lu_lanczos.h, "The one check").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "analysis/core/types.h"

namespace jacond {

enum class Status { kExact, kCertified, kBracket, kSingular, kNotConverged };
std::string to_string(Status s);

struct ConditionReport {
  std::string matrix;          // K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn, softmax, attention, ...
  std::string space = "full";  // "full" or the subspace the matrix is restricted to
  int head = -1;               // head index for per-head matrices, -1 for whole matrices
  Index rows = 0, cols = 0;
  std::string dtype = "fp64";
  std::string method;          // dense-svd, dense-lu-lanczos, dense-qr-lanczos, dense-svd-blockdiag, ...
  double sigma_max = 0, sigma_min = 0;
  double kappa = 0, kappa_lo = 0, kappa_hi = 0;
  Index rank = 0;
  Status status = Status::kExact;
  double seconds = 0;
  Index products = 0;          // mat-vecs / solves used by iterative methods
  /// The bottom of the spectrum (inertia counts, analysis/spectral/inertia.h): how many singular
  /// values lie below 1.01·σ_min and 1.1·σ_min; −1 when not counted.
  Index within_1pct = -1, within_10pct = -1;
  std::string note;
};

/// Noise floor of docs/design.md §4: max(rows, cols) · eps · σ_max.
double noise_floor(Index rows, Index cols, double sigma_max);

/// All singular values, descending (LAPACKE_dgesdd, jobz = 'N'). Throws std::invalid_argument on
/// NaN/inf entries and LapackError (analysis/core/lapack.h) on a nonzero info.
Vec singular_values(Mat A);

/// Builds a report from a full list of singular values (descending or not).
ConditionReport report_from_singular_values(const std::string& matrix, Index rows, Index cols,
                                            const Vec& sv, const std::string& method);

/// Exact κ from the full spectrum.
ConditionReport condition_svd(const Mat& A, const std::string& matrix);

/// Fills κ, the bracket, the status (exact, or singular under the noise floor) and the rank (full,
/// or −1 = unknown with a note) of a report whose σ_max and σ_min an exact extremes route computed
/// (condition_fast and its CUDA twin).
void finish_extremes_report(ConditionReport& r);

/// Marks a report whose extremes route did not reach a checked κ (the mixed and Schur routes):
/// status not-converged, κ and its bracket NaN, rank −1 (unknown), note `why`.
void finish_not_converged_report(ConditionReport& r, const std::string& why);

/// Below this many columns (of the tall side) condition_fast takes the SVD: cheaper than setting
/// up Lanczos, and Spectra's Lanczos needs more columns than its basis anyway. The CUDA twin keeps
/// the same rule (a matrix this small runs on the host).
inline constexpr Index kFastMinSize = 48;

/// Exact κ from σ_max and σ_min only (LU/QR + Lanczos). Falls back to the SVD for tiny
/// matrices (fewer than kFastMinSize columns), if Lanczos does not converge, if an LU pivot is
/// exactly zero (dgetrf info > 0: A is exactly singular) or if a solve overflows (A numerically
/// singular); `note` says which. Throws std::invalid_argument on NaN/inf entries and LapackError
/// on any other nonzero LAPACK info.
ConditionReport condition_fast(Mat A, const std::string& matrix);

/// Exact κ of a block-diagonal matrix from its blocks' spectra. `before_block` (optional) is
/// called before each block's SVD: the caller's cancellation point (n SVDs of d × d are 20 s for
/// ViT-B's K_mlp on 2 threads); what it throws leaves at once.
ConditionReport condition_blockdiag(const std::vector<Mat>& blocks, const std::string& matrix,
                                    const std::function<void()>& before_block = {});

/// Largest singular value (spectral norm) by Lanczos on AᵀA; dense SVD for small A.
double spectral_norm(const Mat& A);

/// One-line rendering for logs: "K_sa 64x64 dense-svd exact σ_max=… σ_min=… κ=… rank=64".
std::string format_report(const ConditionReport& r);

}  // namespace jacond
