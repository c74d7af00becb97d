// Extreme singular values of a matrix-free operator with a κ bracket (docs/design.md §4, issue #4).
//
// Method: Golub–Kahan–Lanczos bidiagonalisation (GKL) with thick restarts and full
// reorthogonalisation, in the augmented-restart form of Baglama & Reichel (IRLBA, 2005):
//   K P_k = Q_k B_k,   Kᵀ Q_k = P_k B_kᵀ + β_k p_{k+1} e_kᵀ,
// P_k (cols × k) and Q_k (rows × k) orthonormal, B_k = Q_kᵀ K P_k (k × k, upper triangular:
// bidiagonal plus, after a restart, one row of couplings). Singular triplets of B_k,
// B_k = U_B Σ V_Bᵀ, give Ritz triplets θ_i, ũ_i = Q_k U_B e_i, ṽ_i = P_k V_B e_i with
//   K ṽ_i = θ_i ũ_i,   Kᵀ ũ_i = θ_i ṽ_i + β_k (U_B)_{k,i} p_{k+1}.
// A restart keeps the ℓ wanted Ritz pairs and p_{k+1} and continues the recurrence.
// B_k's SVD is computed directly (LAPACKE dgesdd), never through B_kᵀB_k, so a Ritz value has
// absolute error O(eps·σ_max), not the O(eps·σ_max²/σ) of Lanczos on KᵀK (docs/design.md §4).
// One run for σ_max, continued for σ_min, and a second start for σ_min (the confirmation under (A)
// and "Both ends from one run" below; gkl.cpp, class GklRun), each in these steps:
//   start     p_1 Gaussian, or the warm start plus 1e-3 of a Gaussian;
//   sweep     left step α_j q_j = K p_j − Q_{j−1} (…), right step β_j p_{j+1} = Kᵀ q_j − P_j (…),
//             each reorthogonalised against the whole basis (classical Gram–Schmidt twice); a
//             breakdown (α or β ≤ eps·‖K‖) continues with a random orthogonal vector;
//   estimate  SVD of B_j, Ritz triplets and η_i from the recurrence, the brackets below (every
//             max(4, j/8) steps mid-sweep, and at the end of each sweep; past `bidiagonal_from`
//             steps without a restart, selected triplets of B_j's bidiagonal part every j/32
//             steps: "Long sweeps" below);
//   stop      bracket tight (or at the rounding allowance) after min_steps, Krylov space
//             exhausted, σ_min under the noise floor, or budget spent;
//   check     the wanted triplet's θ and η recomputed with two explicit products (the recurrence
//             residual can be optimistic once orthogonality is lost): the returned brackets use
//             max(η_recurrence, η_explicit + δ);
//   restart   keep ℓ wanted Ritz triplets and p_{k+1}: B = diag(θ), and the next left step
//             fills in the couplings of q_{ℓ+1} to the kept ones.
// Where the long vectors live: the bases P, Q, the products on them and the Gram–Schmidt passes
// are a KrylovBasis (analysis/operators/krylov_basis.h: the host's in Eigen, or a device's beside
// its products); everything k × k above stays here, on the host.
// Errors: std::invalid_argument for bad options or an empty operator; std::runtime_error when the
// operator returns NaN or inf (checked after every product); LapackError (analysis/core/lapack.h)
// if dgesdd fails on B_k.
// Range: every norm here is Eigen's stableNorm (or std::hypot of two), never a sum of squares,
// which underflows for products below ~1e-154 (α = 0 read as a breakdown: a false `singular`) and
// overflows above ~1e154 (a NaN κ_lo). So the host solver brackets κ at any scale of K; guarded by
// TinyAndHugeOperatorsKeepTheirBracketN80 (1e-300 to 1e300). A device's Krylov basis
// (krylov_basis.h) takes its own norms: the LibTorch one rescales by max|w_i| where ATen's sum of
// squares would leave [1e-140, 1e140] (models/device/torch_operator_device.cpp), guarded by
// TorchOperatorDevice.CpuLanczosKeepsItsBracketAtTinyAndHugeScales.
//
// The augmented matrix H = [0 K; Kᵀ 0] (symmetric, eigenvalues ±σ_j and rows − cols zeros)
// carries the certificates. For z = [ũ; ṽ] with ‖ũ‖ = ‖ṽ‖ = 1, Rayleigh quotient θ = ũᵀKṽ and
//   η = ‖H z − θ z‖ / ‖z‖ = ‖[K ṽ − θ ũ; Kᵀ ũ − θ ṽ]‖ / √2,
// (for a GKL Ritz triplet η = β_k |(U_B)_{k,i}| / √2):
//   (W)  Weyl / Krylov–Bogoliubov: H has an eigenvalue in [θ − η, θ + η].
//   (CF) Courant–Fischer: σ_min(K) ≤ ‖K x‖/‖x‖ ≤ σ_max(K) for every x ≠ 0 (rows ≥ cols), and the
//        Ritz values from K P_k are singular values of K restricted to span P_k, so
//        σ_min(K) ≤ θ_min and θ_max ≤ σ_max(K).
// Brackets (θ_i the kept Ritz values, wanted end first, η_i their residuals):
//   σ_max ∈ [‖K ṽ_1‖ − δ,  max_i (θ_i + η_i)]                  (CF, W)
//   σ_min ∈ [max(0, min_i (θ_i − η_i)),  ‖K ṽ_1‖ + δ]          (W, CF)
// Kato–Temple (λ ≥ θ − η²/(μ − θ) given a gap μ to the next eigenvalue, with μ from θ_2 − η_2)
// would be quadratic in η, but its gap assumption fails silently when two singular values sit
// closer together than the Krylov space can resolve (a single-vector Krylov space then holds one
// mixture of them, with one Ritz value between the two): the test SeparatedSpectrum (σ = 1e-6 and
// 1.5e-6 under a bulk in [0.2, 0.8]) produced a false KT certificate, so KT is not used.
// δ is a rounding allowance (4·sqrt(max(rows, cols))·eps·σ_max) added to every η. The upper end of σ_min
// and the lower end of σ_max are rigorous (CF). (σ_min's upper end was once min(θ_1, ‖K ṽ_1‖) + δ;
// but θ_1 = ũᵀKṽ ≤ ‖K ṽ_1‖ always, so that was θ_1 + δ, which is not a CF bound: with ũ off the
// direction of K ṽ_1 it lies below σ_min. In exact arithmetic K ṽ = θ ũ for a GKL Ritz triplet, and
// the two differ by ~η²/θ ≤ δ in practice, so the old end held on every run we know of; guarded by
// GklBracket.ALeftVectorOffItsDirectionDoesNotLowerSigmaMinsUpperEnd, which perturbs ũ.)
// The other two ends rest on ONE assumption, which no Krylov method can verify without an
// inertia count (a factorisation of H − μI):
//   (A) no singular value of K lies beyond the Ritz values found, i.e. the eigenvalue of H that
//       (W) places near the kept Ritz values include the extreme one. A singular value with
//       (almost) no component in the Krylov space can be missed, and so can one that the space
//       has not yet separated from a close neighbour: the Ritz triplet then settles on the
//       neighbour with a small η, and its Weyl interval does not reach the extreme one.
// (A) is the standard a-posteriori convergence criterion; it can fail when the start vector is
// (nearly) orthogonal to the extreme singular vector, and it does on real blocks: `ours` K_sab
// at n 12, d 16, 2 heads (κ 2157, bottom σ 0.0191, 0.0286, 0.0338 under σ_max 41.3) from the
// default seed converged to a tight bracket around the SECOND smallest singular value, 0.0286
// (found by the SciPy peer of `jacond bench lanczos --check-dense`; six other seeds found
// 0.0191). So the smallest end, where a miss shifts κ, is run twice (confirm_smallest): from the
// warm start (or, without one, the σ_max run continued) and from an independent Gaussian start,
// each to sqrt(1 + tol) − 1, and merged (gkl.cpp, smallest_confirmed). A bracket then rests on the weaker assumption
//   (A2) at most one of two independent Gaussian starts misses the smallest singular value;
// when the two disagree (disjoint brackets) the one with the lower Ritz value is kept and the
// note says a miss was caught. Cost: about twice the smallest end's products. The guarding
// test is MissedStartIsCaughtByTheSecondStart (tests/analysis/spectral/test_svd_bracket.cpp).
// (A2) is not proof against the second way of missing, which does not depend on the start: a
// review found both starts settled on σ_2 = 1.05e-6 when σ_1 = 1e-6 sat 5 % below it under a
// bulk in [0.2, 0.8] (N = 300), bracket [1.045e-6, 1.050e-6], in 1 of 140 random matrices (none
// of 120 with a gap of 50 % or more). An inertia certificate (`--certify`) is the guard: its
// count at 1.01·σ_min,hi sees two values and does not certify the bracket.
// Every bracket's `note` says which assumption it rests on.
// Where the matrix fits a factorisation, analysis/spectral/inertia.h (certify_extremes) replaces
// both assumption-bearing ends by inertia counts: status `certified`.
//
// Both ends from one run: the relations K P_j = Q_j B_j, Kᵀ Q_j = P_j B_jᵀ + β_j p_{j+1} e_jᵀ hold
// whichever end the run iterates for, so (W) and (CF) bound σ_min from the smallest Ritz triplets
// of the σ_max run's B_j as validly as from a run of its own. σ_min's first start therefore takes
// that run's basis and goes on from it (gkl.cpp, GklRun::continue_for_smallest): an estimate on
// the basis as it is, then more steps while there is room, then thick restarts keeping the
// smallest triplets. The steps σ_max took are reused instead of repeated from a new start; on
// well-conditioned blocks (K_ffn, K_sab under `timm`)
// the basis that settled σ_max already brackets σ_min after min_steps, and the call costs two
// runs instead of three (jacond bench lanczos: 150 → ~104 products at nd 6400). With a warm start
// for σ_min (sweeps, checkpoints) that start is used instead: it is closer to the answer.
// The guarding test is SigmaMinFromTheSigmaMaxBasisIsConfirmedAndContained (test_svd_bracket.cpp).
//
// Long sweeps (the unrestarted route, `max_basis` up to the whole space): before the first thick
// restart B_j is upper bidiagonal up to the reorthogonalisation coefficients of the left steps
// (Q_{j−2}ᵀ K p_j, zero in exact arithmetic, O(eps·‖K‖) with CGS2). Past `bidiagonal_from` steps
// the estimate drops them and takes s selected triplets of the bidiagonal part with LAPACKE
// dbdsvdx (O(j·s), against dgesdd's O(j³)). Both changes are paid for in the bounds:
//   F = ‖dropped entries‖_F moves every Ritz value by ≤ F (Weyl for singular values) and every
//       residual by ≤ F (the dropped part enters K ṽ − θ ũ and Kᵀ ũ − θ ṽ once each), so every
//       η_i gets + F;
//   the j − s Ritz values not selected lie beyond θ_{s+1} (next after the selected ones) and
//       have η ≤ β_j/√2 + δ + F (|(U_B)_{j,i}| ≤ 1), so they enter the Weyl end as the single
//       term θ_{s+1} ∓ (β_j/√2 + δ + F); when that term sets the end, s doubles (up to j).
// The guarding test is BidiagonalEstimateAgreesWithTheDenseOne (test_svd_bracket.cpp): the same
// run with bidiagonal_from lowered gives the dense estimate's bracket.
//
// Why thick-restart GKL, and not harmonic or refined Ritz restarts, inner–outer or Jacobi–Davidson
// (issue #10, item 1; measured by `jacond bench lanczos --compare-methods`, README "Which σ_min
// solver"): every method that builds its vectors from one start p_1 and products with K and Kᵀ
// holds, after j products, vectors of the Krylov space K_⌈j/2⌉(KᵀK, p_1); the smallest Rayleigh
// quotient over that space is the Ritz value of the unrestarted run (CF), so no such method's
// σ_min upper end (and hence no 1 % bracket) beats the unrestarted GKL's in products. (Block GKL
// starts from several vectors and is not covered; measured with
// experiments/bench/block_krylov_probe.py, b = 4 and 16 starts were 3–12× further from σ_min than
// one start at the same products. A preconditioner is not covered either; the one the paper
// offers, B_sa⁻¹ (cheap: two d × d and one n × n solve per head), makes K B⁻¹ worse conditioned
// than K, and so does block Jacobi over tokens (K's diagonal d × d blocks):
// experiments/bench/preconditioner_probe.py, README "Which σ_min solver".) On `ours`
// and `timm` blocks (nd 1 600–6 400, κ 3.1e5–6.0e9) that optimum came within 10 % of σ_min only
// when the Krylov space was the whole space (2·nd products; at 90 % of it, still 5–370 × above):
// the bottom lies below a bulk spread over five decades, and the Kaniel–Paige–Saad bound asks for
// ~κ/(2√(r² − 1))·ln(κ√nd) ≫ nd steps (r = σ_2/σ_1 ≈ 4). So at ViT-S a 1 % bracket needs ~nd = 75 648 basis vectors (92 GB), which is a
// factorisation's job (the dense route, or the GPU), and below nd ≈ 24 000 the dense route of
// `auto` is exact and 40–80× faster than exhausting the Krylov space. The default stays a small
// thick restart (96 / 32): at ViT-S it did 3–5× the products of a 512- or 2048-vector basis in
// the same time (reorthogonalisation against a wide basis costs more than the product) and
// reached the highest κ_lo, and on the well-conditioned matrices (K_ffn, K_sab under `timm`) it
// converges in under 100 steps.
//
// Progress: GklOptions::progress, when set, is called at every estimate with the end, the
// products used so far (all runs of the call) and the current bracket, so a benchmark can record
// products-to-accuracy curves (jacond bench lanczos --compare-methods).
//
// Status of the report: `bracket` when κ_hi/κ_lo ≤ 1 + tolerance was reached, or when the
// residuals reached the rounding allowance δ (the bracket cannot shrink further; said in note); `singular` when
// σ_min_hi < noise floor max(rows, cols)·eps·σ_max_lo, or when σ_min's finished bracket reaches down to 0
// (σ_min cannot be told from 0 in fp64; a rank-3 10 × 10 matrix was a `bracket` [κ_lo, inf] with
// a κ of 1.7e17): κ ≥ σ_max_lo/σ_min_hi is all that is known, as the dense route's `singular`; `not-converged`
// with the best bracket reached when products or seconds ran out.
#pragma once

#include <functional>
#include <string>

#include "analysis/core/types.h"
#include "analysis/operators/krylov_basis.h"  // OperatorRef, KrylovSpace
#include "analysis/spectral/condition.h"

namespace jacond {

/// One estimate of a run, for GklOptions::progress.
struct GklProgress {
  bool smallest = false;    // which end
  Index products = 0;       // products of the whole call so far (both ends, both starts)
  Index steps = 0;          // GKL steps of this run
  double lo = 0, hi = 0;    // the end's current bracket (recurrence residuals)
};

struct GklOptions {
  Index max_basis = 96;        // Krylov basis size k before a thick restart (capped at min(rows, cols))
  Index keep = 32;             // Ritz triplets ℓ kept at a restart (capped at k − 1)
  Index max_products = 200000; // K and Kᵀ products together, both ends
  double max_seconds = 120;    // wall-clock budget, both ends
  double tolerance = 0.01;     // target κ_hi/κ_lo ≤ 1 + tolerance
  Index min_steps = 24;        // GKL steps per end before a bracket may be accepted (guards (A))
  uint64_t seed = 20240607;    // Gaussian start vectors
  bool confirm_smallest = true; // σ_min from two independent starts, merged under (A2) (header comment)
  Index bidiagonal_from = 384;  // steps before the first restart from which estimates use the
                               // bidiagonal part and selected triplets (header comment, "Long sweeps")
  std::function<void(const GklProgress&)> progress;  // called at every estimate (optional)
};

/// One end of the spectrum.
struct SingularEnd {
  double theta = 0;          // Ritz value
  double lo = 0, hi = 0;     // bracket (see the header comment for which ends assume (A))
  double residual = 0;       // η of the returned triplet, explicit: ‖[Kv − θu; Kᵀu − θv]‖/√2
  Vec u, v;                  // unit left / right Ritz vectors
  Index products = 0, restarts = 0;
  double seconds = 0;
  bool converged = false;
  // Why an unconverged end stopped: the product/time budget, or (smallest end) its bound fell under
  // the run's noise floor. Neither: a confirmation whose two starts gave no one tight bracket.
  bool out_of_budget = false, below_floor = false;
  std::string bound;         // "weyl", "weyl-rounding" (η at δ), "exhausted" (Krylov space = whole space)
};

/// Start vectors for the two ends (right vectors of the operator, length cols, or of its
/// transpose when rows < cols); empty means a random start. Returned filled so sweeps and
/// checkpoints can chain calls.
struct GklWarmStart {
  Vec v_max, v_min;
};

struct LanczosCondition {
  ConditionReport report;    // method "gkl", status bracket | singular | not-converged
  SingularEnd largest, smallest;
  GklWarmStart warm;
};

/// σ_max alone (bracket to relative width `rel_tol`), for spectral norms.
SingularEnd gkl_largest(const OperatorRef& op, const GklOptions& opt, double rel_tol, const Vec& start = Vec());

/// σ_min alone, to relative width `rel_tol`, given σ_max_hi for the rounding allowance and the
/// noise floor (stops early, unconverged, once σ_min_hi is below the floor).
SingularEnd gkl_smallest(const OperatorRef& op, const GklOptions& opt, double rel_tol, double sigma_max_hi,
                         const Vec& start = Vec());

/// κ bracket of an operator: σ_max first, then σ_min to the remaining tolerance.
LanczosCondition condition_lanczos(const OperatorRef& op, const std::string& matrix, const GklOptions& opt = {},
                                   const GklWarmStart& warm = {});

/// The same on a Krylov space whose basis lives elsewhere (a device; rows ≥ cols): the
/// recurrence, bounds and statuses are this file's, the long vectors the space's KrylovBasis.
LanczosCondition condition_lanczos(const KrylovSpace& space, const std::string& matrix, const GklOptions& opt = {},
                                   const GklWarmStart& warm = {});

template <typename Op>
LanczosCondition condition_lanczos(const Op& op, const std::string& matrix, const GklOptions& opt = {},
                                   const GklWarmStart& warm = {}) {
  return condition_lanczos(make_operator_ref(op), matrix, opt, warm);
}

}  // namespace jacond
