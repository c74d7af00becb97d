// Counting singular values below a shift by Sylvester's law of inertia, and the `certified`
// status built on it (docs/design.md §4, issue #10).
//
// Math. For K (m × n) and a shift μ > 0, the augmented matrix
//   H_μ = [ −μ I_m    K    ]
//         [   Kᵀ   −μ I_n  ]                                   (order M = m + n)
// has eigenvalues σ_j − μ and −σ_j − μ (j = 1..min(m, n)) and −μ (|m − n| times), so
//   #neg(H_μ) = max(m, n) + N(μ),   N(μ) := #{j : σ_j < μ}.
// Sylvester: H_μ = P L D Lᵀ Pᵀ (analysis/spectral/ldlt.h: rook-pivoted dsytrf_rk on the host,
// Bunch–Kaufman cusolverDnDsytrf on a GPU; L unit lower triangular, D block diagonal with 1 × 1 and
// 2 × 2 blocks) is a congruence, so H_μ and D have the same inertia. A 2 × 2 pivot [a b; b c] of
// either pivoting has |ac| < 0.41 b² (ldlt.h), so det < 0: one eigenvalue of each sign, decided
// without rounding doubt once the block is scaled by a power of two (unscaled, ac − b² underflows
// to 0 below entries of ~1e-154 and overflows to NaN above ~1e154: inertia.cpp, negative_count).
//
// Why H_μ and not KᵀK − μ²I (half the order): forming KᵀK costs an absolute error O(eps·σ_max²)
// in σ_j², i.e. a relative error O(eps·κ²) in σ_min (1e-4 at κ = 1e6, so the count near σ_min is
// noise). H_μ holds K's entries exactly, and its backward error below is O(eps·‖H‖), a relative
// error O(eps·κ) in σ_min.
//
// Rounding: when the count is exact. The computed factors satisfy (Higham, Accuracy and Stability
// of Numerical Algorithms, 2nd ed., Thm 11.3, for the diagonal pivoting method with any pivoting)
//   P L̂ D̂ L̂ᵀ Pᵀ = H_μ + ΔH,   |ΔH| ≤ p(M) u (|H_μ| + P |L̂||D̂||L̂ᵀ| Pᵀ) + O(u²),
// p a linear polynomial (Higham gives no constant; we take p(M) = 2M, twice LU's γ_M, for the
// 2 × 2 pivot solves: THE ONE ASSUMPTION of this file). The count is the exact inertia of the
// computed factors, i.e. of H_μ + ΔH. Weyl moves each eigenvalue by at most ‖ΔH‖₂ ≤ δ, with
//   δ = γ (ρ(|H_μ|) + ρ(|L̂||D̂||L̂ᵀ|)),  γ = p(M)u / (1 − p(M)u),
// (‖ΔH‖₂ ≤ ‖|ΔH|‖₂ ≤ ρ of the entrywise bound, monotone for nonnegative matrices; ρ(P Y Pᵀ) = ρ(Y);
// ρ of a sum of nonnegative symmetric matrices ≤ the sum of their ρ) and rigorous upper bounds
//   ρ(|H_μ|) ≤ μ + sqrt(‖K‖₁ ‖K‖_∞)          (‖B‖₂² ≤ ‖B‖₁‖B‖_∞ for B = |K|),
//   ρ(Y) ≤ max_i (Y x)_i / x_i  for any x > 0  (Collatz–Wielandt; x from 3 power steps on Y),
// so that, for μ > δ,
//   N(μ − δ) ≤ below ≤ N(μ + δ).                                                     (C)
// (C) needs no convergence assumption. Consequences used by certify_extremes:
//   below = 0             ⇒ σ_min ≥ μ − δ;
//   below = min(m, n)     ⇒ σ_max ≤ μ + δ;
//   below ≥ 1             ⇒ σ_min <  μ + δ.
// `decided` says whether the count is N(μ) itself: no singular value within δ of μ. That is read
// from the eigenvalue of H_μ nearest 0, found by Lanczos on H_μ⁻¹ through the factors (LAPACKE
// dsytrs_3): a Lanczos answer, so `decided` is information, never used for a certificate.
//
// Nearest singular values. The same shift-invert Lanczos returns the k eigenpairs (λ_i, v_i) of
// H_μ nearest 0; each explicit residual r_i = ‖H_μ v_i − λ_i v_i‖ / ‖v_i‖ (an upper bound: computed
// in long double, plus that computation's rounding bound, 2¹¹ below fp64's, which at κ 1e12 was a
// third of σ_min where the residuals themselves were 1e-3 of it; plus 4u(μ + |λ_i|) for the fp64
// rounding of the interval's ends) puts an eigenvalue of H in [μ + λ_i − r_i, μ + λ_i + r_i] (Weyl). An interval inside (0, ∞)
// holds a singular value. If the count at μ is c and c such intervals lie, pairwise disjoint,
// below μ − δ, then by (C) they hold every singular value below μ − δ, and the lowest one holds
// σ_min: a two-sided certificate from one factorisation. The intervals need not come from the
// count's own factorisation (a residual is of H itself): pairwise disjoint ones from any shifts
// serve. certify_extremes counts at μ₁ = 1.01·σ̂; when δ₁ is wider than that margin (on real
// blocks |L̂||D̂||L̂ᵀ| grows with κ: δ was 2–13 % of σ_min at κ 1e6–1e9 under rook pivoting, 36 %
// at κ 3e6 under a GPU's Bunch–Kaufman, above σ_min itself at κ 1e12), σ_min's interval reaches
// above μ₁ − δ₁, and one more count at μ₂ = σ̂ + max(1 %, 4 δ₁) places it with the intervals of
// both shifts (μ₁'s hold the bottom values, μ₂'s those near μ₂); only if that fails too does a
// count of 0 (at μ₁, or just below σ̂) give the weaker σ_min ≥ μ₀ − δ₀, a certificate only where
// that is positive. Guarded by RadiusWiderThanTheMarginIsMetByASecondShift,
// ARadiusWiderThanTheSecondShiftsOldGateIsMetByTheIntervalsOfBothShifts and, for the pooling,
// OnlyTheFirstShiftsIntervalsPlaceSigmaMinWhenTheSecondsAreNearItsShift (a cluster just above μ₂
// takes the second count's own intervals; fails without μ₁'s).
//
// Cost: one dsytrf_rk of order M = m + n, M³/3 flops (≈ 2 min at m = n = 12 500 on 2 cores), and
// 8 M² bytes (5 GB at m = n = 12 500); analysis/spectral/dense_cost.h predicts both. Where it runs
// is the DenseDevice's (`ldlt`, default the host): on a GPU (analysis/cuda/dense_cuda.h) the
// factorisation and the shift-invert solves run on the device, and the O(M²) rest here (the count,
// a few passes of |L||D||Lᵀ| for δ) on the host's copy of the factors.
// Guarded by tests/analysis/spectral/test_inertia.cpp: counts equal the dense SVD's at shifts
// between, inside a cluster of, and within rounding of singular values (there: decided = false),
// and a certified row always contains the dense σ_min and σ_max.
#pragma once

#include <string>
#include <vector>

#include "analysis/core/types.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_cost.h"
#include "analysis/spectral/dense_device.h"

namespace jacond {

/// An interval that holds one singular value (from a residual bound).
struct SingularInterval {
  double lo = 0, hi = 0;
};

struct SingularValueCount {
  double mu = 0;
  Index below = 0;        // inertia count: N(μ − δ) ≤ below ≤ N(μ + δ)   (C)
  double delta = 0;       // rounding radius δ of (C)
  bool zero_pivot = false;  // D̂ had an exactly zero pivot: μ is a singular value to working precision
  bool decided = false;   // the nearest singular value is farther than δ from μ (Lanczos; see header)
  /// Singular values nearest μ, ascending, each interval holding one (may be empty).
  std::vector<SingularInterval> nearest;
  double seconds = 0;
  std::string where = "cpu";  // the device that factorised H_μ
};

/// Counts the singular values of K below μ (> 0). `nearest` eigenpairs of H_μ are computed for
/// `decided` and the intervals (−1: below + 1, at most 9; 0: none, and `decided` stays false:
/// certify_extremes' counts that only need the number). `device` factorises H_μ (its `ldlt`).
/// Throws std::invalid_argument on NaN/inf entries or μ ≤ 0, LapackError on a LAPACK failure (a
/// device's own error, e.g. CudaError, on a device failure).
SingularValueCount count_singular_values_below(const Mat& K, double mu, int nearest = 1,
                                               const DenseDevice& device = *cpu_dense_device());

/// What certify_extremes proved, and the bottom of the spectrum it saw.
struct CertifiedExtremes {
  double sigma_min_lo = 0, sigma_min_hi = 0;  // σ_min ∈ [lo, hi]
  double sigma_max_lo = 0, sigma_max_hi = 0;  // σ_max ∈ [lo, hi]
  bool min_certified = false, max_certified = false;
  Index within_1pct = -1, within_10pct = -1;  // counts below 1.01 and 1.1 × σ_min's estimate (−1: not computed)
  Index factorisations = 0;
  double seconds = 0;
  std::string note;
  std::string where = "cpu";  // the device that factorised H_μ
  /// A count contradicts the claim itself, not just its assumption-bearing end: N((1 + 1e-6)·σ_max_hi)
  /// < min(rows, cols) (a singular value above the claimed σ_max), or no singular value below
  /// 1.01 × the claimed σ_min's upper end (σ_min above it), or a count that saw a value below the
  /// claimed σ_min's lower end (σ_min below it). certify_report then answers with the SVD.
  bool refuted = false;
};

/// What a route claims of K's extreme singular values. The counts prove σ_min's lower end and
/// σ_max's upper end; the two inner ends (σ_min's upper, σ_max's lower: what κ_lo rests on) are
/// taken from the claim only as far as the claim proves them:
///  - bracket(...): a GKL bracket (gkl.h), whose σ_min upper end ‖Kṽ_1‖ + δ and σ_max
///    lower end ‖Kṽ_1‖ − δ are Courant–Fischer ends with their rounding allowance: kept as they are.
///  - estimate(σ_min, σ_max): a dense route's point values (LU + inverse Lanczos, mixed, SVD). Their
///    σ_min carries a relative error up to O(κ·u) (the solves' backward error against a σ_min that
///    small; 1e-5 at κ 7e8, wider than a located interval), so it proves nothing and only says where
///    to count: σ_min's upper end is counted (the located interval's upper end, or μ + δ of a count
///    that saw a value: (C)). Their σ_max proves nothing either (a Lanczos Ritz value, which Spectra
///    can return above the spectrum: lu_lanczos.h, "The σ_max check"), so its lower end is
///    sigma_max_lower_end(K): Courant–Fischer on a vector of certify_extremes' own.
/// Found by reviews: a dense estimate taken as a Courant–Fischer end gave a `certified` κ_lo above
/// the SVD's κ (722 774 381 against 722 774 375 at κ 7.2e8; guarded by
/// CertifyExtremes.ADenseEstimateBelowSigmaMinIsNotTakenAsItsUpperEnd), and a σ_max 2 % above the
/// spectrum, taken less 1e-10 as its lower end, a `certified` κ ∈ [203.961, 203.961] for a true 200
/// (guarded by CertifyReport.ASigmaMaxAboveTheSpectrumIsNotCertified).
///
/// A claim whose σ_min lower end lies above an upper end a count proves (a count that saw a value
/// below it, (C)) is refuted (CertifiedExtremes::refuted), not kept with its κ_hi.
struct ClaimedExtremes {
  double sigma_min_lo = 0, sigma_min_hi = 0;  // where σ_min was found; hi is the count's target
  double sigma_max_lo = 0, sigma_max_hi = 0;
  bool courant_fischer = false;  // sigma_min_hi and sigma_max_lo are proofs (a GKL bracket)
  static ClaimedExtremes bracket(double sigma_min_lo, double sigma_min_hi, double sigma_max_lo, double sigma_max_hi) {
    return {sigma_min_lo, sigma_min_hi, sigma_max_lo, sigma_max_hi, true};
  }
  static ClaimedExtremes estimate(double sigma_min, double sigma_max) {
    return {sigma_min, sigma_min, sigma_max, sigma_max, false};
  }
};

/// A rigorous lower end of σ_max(K) by Courant–Fischer: ‖K x‖/‖x‖ less the rounding of computing it
/// (inertia.cpp states the bound), for x the top Ritz vector of KᵀK (KKᵀ for a wide K) by Lanczos
/// from a Gaussian start on K scaled by a power of two (the dense SVD's vector below 48 columns;
/// power steps if Lanczos fails: the bound holds for any x, a poor x only loosens it). O(mn) per
/// product, tens of products: small beside one count's factorisation. 0 for an empty, zero or
/// non-finite K.
double sigma_max_lower_end(const Mat& K);

/// Replaces the assumption-bearing ends of a claim by inertia counts: σ_min_lo and σ_max_hi are
/// proven by counts at μ = 1.01·σ_min_hi (bottom, with nearest intervals), 1.1·σ_min_hi (bottom
/// cluster, if `bottom_counts`) and (1 + 1e-6)·σ_max_hi (top); the inner ends as ClaimedExtremes
/// says (σ_max's lower end by sigma_max_lower_end unless the claim is a bracket). A loose σ_min claim (hi/lo > 1.05) is first refined by condition_fast (an estimate: where
/// to count). An end that a count does not confirm stays uncertified (the note says why).
/// `device` runs the factorisations (its `ldlt` and, for a loose claim, its condition_fast).
CertifiedExtremes certify_extremes(const Mat& K, const ClaimedExtremes& claim, bool bottom_counts = true,
                                   const DenseDevice& device = *cpu_dense_device());

/// `--certify`: none, inertia (always), auto (when the counts fit the memory and time budget).
enum class CertifyMode { kNone, kInertia, kAuto };
CertifyMode parse_certify_mode(const std::string& s);  // std::invalid_argument naming the value
std::string to_string(CertifyMode m);

/// certify_extremes on a report of K: on success status `certified` with the rigorous κ_lo, κ_hi,
/// method + "+inertia" ("+inertia-cuda" where a GPU factorised H_μ), and the note saying what was
/// counted. κ, σ_min and σ_max stay the route's values where they lie in the certified intervals
/// (κ ∈ [κ_lo, κ_hi], as `certified` promises, condition.h); a value outside (a not-converged GKL
/// report's σ_min, 237× too large in a review's case) is replaced by the nearest proven end and the
/// note says so. A `singular` report, or one whose counts do not confirm both ends, is returned
/// with only a note. (K is not read for a `singular` report.) A report the counts refute
/// (CertifiedExtremes::refuted: an `exact` σ_max below a counted singular value, say) is not
/// returned under its status: the device's SVD of K answers, with a note naming the refuted route
/// and what was counted, and is certified in turn.
ConditionReport certify_report(ConditionReport r, const Mat& K, const ClaimedExtremes& claim,
                               const DenseDevice& device = *cpu_dense_device());

}  // namespace jacond
