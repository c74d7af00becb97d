// κ of a square operator too large for one dense LU where its products run: a block LU whose
// diagonal pieces are dense and whose off-diagonal blocks stay matrix-free. condition_fast's
// algorithm (lu_lanczos.h) with this factorisation as its backend; written once for every device,
// a Store supplying the memory and the LU.
//
// Math. Cut the N × N operator A into p diagonal pieces at 0 = c_0 < c_1 < … < c_p = N (piece k
// holds indices [c_k, c_k+1), s_k of them) and let A^(k) be its leading c_k × c_k principal
// submatrix. A^(k+1) = [A^(k) A12; A21 A22] with A22 piece k's diagonal block, and
//   D_0 = A^(1),   D_k = A22 − A21 (A^(k))⁻¹ A12   (the Schur complement of A^(k) in A^(k+1))
// so that A^(k+1) = [I 0; A21 (A^(k))⁻¹ I] [A^(k) A12; 0 D_k], and with b = [b1; b2] split at c_k
//   A^(k+1) x = b:   u = (A^(k))⁻¹ b1,  x2 = D_k⁻¹ (b2 − A21 u),  x1 = u − (A^(k))⁻¹ A12 x2      (1)
//   A^(k+1)ᵀ z = c:  u = (A^(k))⁻ᵀ c1,  z2 = D_k⁻ᵀ (c2 − A12ᵀ u), z1 = u − (A^(k))⁻ᵀ A21ᵀ z2     (2)
// ((A^(k+1))ᵀ's Schur complement on (A^(k))ᵀ is D_kᵀ), recursively down to D_0, and A = A^(p).
// A21 u, A12 w and their transposes are the operator's own products with padded vectors:
// A [u; 0] restricted to piece k's rows is A21 u, A [0; w; 0] restricted to the rows before c_k
// is A12 w. So only the D_k are stored, as LU factors with partial pivoting: Σ s_k² entries, N²/p
// for equal pieces. p = 2 (the fewest) holds half of N²: ViT-B's K_sa (N = 151 296) in 91.6 GB
// of fp64 where A is 183 GB, on one H200; p = 3 holds a third, 61 GB, on one H100 (issue 11,
// item 3). D_k is formed a column panel E (unit columns) at a time, storing no off-diagonal block:
//   [A12 E; A22 E] = top c_k+1 rows of A [0; E; 0],  Y = (A^(k))⁻¹ (A12 E),
//   D_k E = A22 E − (A [Y; 0] restricted to piece k's rows)                                     (3)
// Cost for equal pieces of b = N/p: a solve (1) with A^(k+1) costs T_k = 2 T_k−1 + 2b² flops
// (T_0 = 2b²: T_k = (2^(k+1) − 1)·2b²), so forming all D_k takes Σ b·T_k−1 = 2b³ (2^p − p − 1)
// and their LUs p·⅔b³: 5/12 N³ at p = 2, 10/27 N³ at p = 3, 0.385 N³ at p = 4, against the full
// LU's ⅔ N³ (dense_cost.h's schur_route_cost). A solve of A (one vector) reads D_0 2^(p−1) times
// and D_k (k ≥ 1) 2^(p−1−k) times: 0.75 N² entries at p = 2, 0.78 N² at p = 3, 0.94 N² at p = 4,
// against the full LU's N², with 2^p − 2 products.
//
// Accuracy. Partial pivoting stays inside each D_k: the elimination across the cuts is pivot-free,
// backward stable when ‖A21 (A^(k))⁻¹‖ and ‖(A^(k))⁻¹ A12‖ are moderate (Higham, Accuracy and
// Stability of Numerical Algorithms, §13.2) and not in general, and the growth compounds with the
// pieces (K_sa at N = 12 800, κ 2.7e6: the unrefined backward error is 5.6e-12 in two pieces,
// 2.1e-11 in three, 3.0e-8 in four). So every solve of A is refined in fp64 against the operator
// (x ← x + solve(b − A x), the product matrix-free: fixed-precision refinement, ibid. §12.2), once
// always and again while the normwise backward error η = ‖b − A x‖ / (σ_max ‖x‖ + ‖b‖), measured
// by one more product, is above kSchurBackwardErrorTarget (4 u) and at least halves per step, at
// most kSchurMaxRefinements times; the note states the largest η of the run and the most steps.
// Refinement converges while the solves' error is a contraction, which fails where a leading block
// is far worse conditioned than A: a dense A of κ 13 whose leading 10 × 10 block has σ down to 1e-9
// needs two steps (7e-6 → 1e-16), down to 1e-12 it stalls (five steps end at 1.7e-8; SchurRoute.
// AVeryIllConditionedLeadingBlock…). The note's η says which; the check below stays the judge. What certifies σ_min is lu_lanczos.h's one check, ‖A v_min‖ by
// the operator: a failed check (the solves' σ_min below its own vector's ‖A v‖) is reported
// not-converged, never as a κ.
//
// The one assumption: the leading principal submatrices at the cuts, A^(1) … A^(p−1), are
// nonsingular. A zero pivot in D_0 … D_p−2 says nothing about A (a permutation matrix can have
// A^(1) = 0), so it is reported not-converged with a note. A zero pivot of D_p−1 says the computed
// factors are of a singular matrix (det A = Π det D_k); the SVD that answers it on the full route
// does not fit where this route is used, so the factors give a null vector and the operator judges
// it. With P D = L U the factors of D = D_p−1 and U(j, j) its first zero pivot (U's leading j × j
// block U11 is then nonsingular), v = [−U11⁻¹ u; 1; 0] (u: the j entries above the pivot) has
// U v = 0, so D v = Pᵀ L U v = 0, and by the factorisation of A = A^(p) above
//   x = [−(A^(p−1))⁻¹ A12 v; v]   has   A x = [0; D v] = 0                                       (4)
// in exact arithmetic on the computed factors. The factors are those of A + E, E the formation's
// error (the D_k are formed by unrefined solves across the cuts), so ‖A x‖ / ‖x‖ is of the order
// of ‖E‖: 53 noise floors for B_sa in HostSchurRoute.AnOutputFeature…, 1 500 for a singular
// E_sa's Ritz vector. x is then refined against the operator in a Krylov space: with every zero
// pivot of U set to δ = eps·σ_max (M: the solve (1) with these factors, A + E + F, F of size δ),
// V = orth{x, M A x, (M A)² x, …} holds the iterates of x ← x − M A x, whose residual A x shrinks
// by (I − A M) = (E + F) M per step, small on range(A) while ‖E‖ is small against A's smallest
// nonzero σ; the vector of V minimising ‖A V c‖ (the SVD of the N × m matrix A V, by the
// operator) is at least as good as each iterate, whatever M's large null-space part adds       (5)
// (at most kSchurNullVectorSteps steps, each one solve (1) and two products, fewer once ‖A x‖ is
// a tenth of the floor; one step took K_sa at N 1 280 in three pieces from 12.7 floors to a
// 9 000th of one).
// σ_min ≤ ‖A x‖ / ‖x‖ for any x, so ‖A x‖ ≤ the noise floor (N·eps·σ_max) times ‖x‖, computed by
// the operator in fp64, proves A singular to working precision: status singular, rank unknown
// (lu_lanczos.h's check of a singular claim). Above the floor the factors were too far from A to
// tell: not-converged, with the bound κ ≥ σ_max / (‖A x‖ / ‖x‖ + floor) that x still gives.
// (5) serves the numerically singular A too (no exact zero pivot): where the solves put σ_min at or
// below the floor but their Ritz vector v has ‖A v‖ above it (the check fails: same cause), v is
// refined by (5) with the factors as they are, and judged the same way.
//
// Store concept (host: CpuSchurStore below, LAPACKE; CUDA: analysis/cuda/dense_cuda.cpp, cuSOLVER):
//   Buffer alloc(size_t count)                           count doubles in the map's memory; .get()
//   void copy(Index rows, Index cols, const double* src, Index ld_src, double* dst, Index ld_dst)
//   void zero(Index rows, Index cols, double* dst, Index ld)
//   void subtract(Index rows, Index cols, const double* a, Index lda, const double* b, Index ldb,
//                 double* c, Index ldc)                  c = a − b (c may be a, with ldc = lda)
//   void upload(const double* host, double* dst, Index count), download(const double* src, double* host, Index count)
//   Pivots pivots(Index m)
//   FactorOutcome lu_factor(double* a, Index m, Pivots& p, Index* zero_pivot)
//                                  in place, leading dimension m; kExactlySingular: *zero_pivot = j of the first U(j, j) = 0
//   void lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs, Index ldb)
//   void upper_solve(const double* lu, Index m, Index k, double* b)  b ← U11⁻¹ b, U11 the factors' leading k × k
//                                                                    upper triangle (k entries of b)
//   Index replace_zero_pivots(double* lu, Index m, double value)     every U(i, i) = 0 set to value; how many,
//                                                                    or −1 if a U(i, i) is not finite (a device's
//                                                                    LU may divide by the zero pivot: NaN past it)
// The map (analysis/operators/operator_device.h) must assemble_columns and apply_columns in the
// Store's memory (TokenMap::assembles_into); products with Aᵀ go through the host (apply_transpose,
// one vector each: only the Lanczos solves (2) take them).
//
// Guarded by tests/models/test_operator_device.cpp (SchurRoute*: the route on the CPU, with
// LibTorch's CPU maps and the host store, against condition_fast of the assembled matrix for every
// attention operator and skip mode, at several cuts and piece counts; the zero-pivot outcomes) and,
// on a GPU, by OperatorDeviceCuda.SchurRouteAgreesWithTheHostsFullLu; (4) by SchurRoute.AZeroPivot…
// (a zero pivot in the last piece: singular; factors that are not of the operator: not-converged,
// with the bound), (5) by SchurRoute.TheNullVectorIsRefinedAgainstTheOperator… (12.7 floors
// unrefined), both by HostSchurRoute.AnOutputFeatureTheBlockNeverWrites… and SchurRoute.
// ANeverWrittenOutputFeature… (K_sa, B_sa, E_sa with n zero rows; the latter's GPU twin); (5) on
// the solves' own Ritz vector by SchurRoute.BlockJacobiansEqualTheFullLu… (the singular E_sa and
// skipless K_sab: singular in every cut, 14 of 48 rows by (5)).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analysis/core/clock.h"
#include "analysis/core/types.h"
#include "analysis/operators/operator_device.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_cost.h"
#include "analysis/spectral/lu_lanczos.h"

namespace jacond {

/// Where the route cuts and how wide its panels are.
struct SchurPlan {
  Index order = 0;          // N
  std::vector<Index> cuts;  // c_1 < … < c_p−1, inside (0, N): p = cuts.size() + 1 pieces
  Index panel = 0;          // columns of (3) formed at once

  /// The plan of an N × N operator in `pieces` equal pieces (schur_cut: c_k = k N / p; two, the
  /// fewest, hold half of N²), panels of `panel_bytes` (the 2p − 1 N × w buffers bytes() counts).
  static SchurPlan for_order(Index order, double panel_bytes = 2e9, Index pieces = 2) {
    SchurPlan p;
    p.order = order;
    for (Index k = 1; k < pieces; ++k) p.cuts.push_back(schur_cut(order, pieces, k));
    const double buffers = static_cast<double>(2 * pieces - 1) * 8.0 * static_cast<double>(order);
    p.panel = static_cast<Index>(std::clamp(std::floor(panel_bytes / buffers), 1.0,
                                            static_cast<double>(std::max<Index>(1, p.largest_piece()))));
    return p;
  }
  Index pieces() const { return static_cast<Index>(cuts.size()) + 1; }
  Index begin(Index k) const { return k == 0 ? 0 : cuts[k - 1]; }
  Index end(Index k) const { return k + 1 == pieces() ? order : cuts[k]; }
  Index size(Index k) const { return end(k) - begin(k); }
  Index largest_piece() const {
    Index largest = 0;
    for (Index k = 0; k < pieces(); ++k) largest = std::max(largest, size(k));
    return largest;
  }
  /// Bytes the route holds where the map's products run: the D_k, a panel of columns, two panels
  /// per piece after the first (the padded inputs and products of (1)–(3) at that level) and a
  /// vector (the map's own batch intermediates and the LU workspace are the caller's to add).
  double bytes() const {
    double blocks = 0;
    for (Index k = 0; k < pieces(); ++k) blocks += static_cast<double>(size(k)) * static_cast<double>(size(k));
    const double panels = static_cast<double>(2 * pieces() - 1) * static_cast<double>(order) * static_cast<double>(panel);
    return 8.0 * (blocks + panels + static_cast<double>(order));
  }
};

/// Where a dense device runs the exact κ of an N × N map it assembles itself
/// (condition_fast_assembled, analysis/cuda/dense_cuda.cpp; docs/design.md §10), decided from its
/// free memory F alone, in this order:
///   kWhole     the whole LU:  8 N² + extra(N) + assembly ≤ F;
///   kSchur     the Schur route in the fewest pieces p = 2 … kMaxSchurPieces whose plan
///              (SchurPlan::for_order, 2 GB of panels) fits: bytes() + extra(largest piece) +
///              assembly ≤ F. Fewest, because each piece more adds 2^p − 2 products to every solve;
///   kHostCopy  the whole LU of a copy the host assembles (condition_fast):  8 N² + extra(N) ≤ F.
///              It holds no batch of the map's intermediates on the device, and at small N the
///              plans' 2 GB of panels outweigh the matrix itself (N 6 400: 0.33 GB), so a device
///              can hold this where it holds neither of the above;
///   kNone      none of these: the device refuses, naming the sizes (device_lu_refusal), before
///              anything is assembled: a host copy would not fit it either (kHostCopy's test).
/// `assembly` = TokenMap::assembly_bytes() (LibTorch's cache keeps the batch's memory after the
/// assembly, and the free memory does not count it free); `lu_extra(m)` = what an m × m LU holds
/// beyond its m² matrix: pivots, vectors and the library's workspace (on the GPU, cuSOLVER's
/// Xgetrf buffer-size query). Pure, so the GPU's decision, which no GPU test reaches (their maps
/// are small enough for the whole LU), is tested on the CPU: DeviceLuChoice.* in
/// tests/analysis/spectral/test_schur_host.cpp (ViT-B on an H200 and on an H100, nd 6 400, the
/// boundaries of each outcome).
struct DeviceLuChoice {
  enum class Route { kWhole, kSchur, kHostCopy, kNone } route = Route::kNone;
  SchurPlan plan;                  // kSchur: the plan taken
  double whole_bytes = 0;          // 8 N² + extra(N) + assembly
  double least_schur_bytes = 0;    // the smallest plan tried, as its test counts it
  Index least_schur_pieces = 0;    // and its pieces
};

inline DeviceLuChoice choose_device_lu(Index order, double free_bytes, double assembly_bytes,
                                       const std::function<double(Index)>& lu_extra_bytes) {
  DeviceLuChoice c;
  const double N = static_cast<double>(order), host_copy = 8.0 * N * N + lu_extra_bytes(order);
  c.whole_bytes = host_copy + assembly_bytes;
  if (c.whole_bytes <= free_bytes) {
    c.route = DeviceLuChoice::Route::kWhole;
    return c;
  }
  for (Index p = 2; p <= std::min(kMaxSchurPieces, order); ++p) {
    const SchurPlan plan = SchurPlan::for_order(order, 2e9, p);
    const double need = plan.bytes() + lu_extra_bytes(plan.largest_piece()) + assembly_bytes;
    if (c.least_schur_pieces == 0 || need < c.least_schur_bytes) {
      c.least_schur_bytes = need;
      c.least_schur_pieces = p;
    }
    if (need <= free_bytes) {
      c.route = DeviceLuChoice::Route::kSchur;
      c.plan = plan;
      return c;
    }
  }
  c.route = host_copy <= free_bytes ? DeviceLuChoice::Route::kHostCopy : DeviceLuChoice::Route::kNone;
  return c;
}

/// The one-line refusal of a kNone choice for `matrix` on `device` (its description, which on a GPU
/// names its free memory too): the order, what the whole LU and the least Schur plan need, the
/// free memory, and the way out.
inline std::string device_lu_refusal(const std::string& matrix, Index order, const DeviceLuChoice& c,
                                     double free_bytes, const std::string& device) {
  std::ostringstream os;
  os.precision(3);
  os << matrix << " (" << order << " x " << order << ") does not fit " << device << ": the whole LU needs "
     << c.whole_bytes / 1e9 << " GB, the Schur route at least " << c.least_schur_bytes / 1e9 << " GB (in "
     << c.least_schur_pieces << " pieces), " << free_bytes / 1e9
     << " GB are free; the lanczos route brackets it matrix-free";
  return os.str();
}

/// A x for a vector x of the map's order (the map takes its n × d token matrix).
inline Vec apply_vector(const TokenMap& map, const Vec& x) {
  const Mat Ax = map.apply(Eigen::Map<const Mat>(x.data(), map.n(), map.d_in()));
  return Eigen::Map<const Vec>(Ax.data(), Ax.size());
}

/// (5) takes at most this many steps (each a solve (1) and two products).
inline constexpr Index kSchurNullVectorSteps = 6;

/// Refinement of a solve stops at this backward error (4 u) ...
inline constexpr double kSchurBackwardErrorTarget = 2 * std::numeric_limits<double>::epsilon();
/// ... or after this many steps, or when a step does not halve it.
inline constexpr Index kSchurMaxRefinements = 5;

/// What a run of the route saw, for the report's note.
struct SchurStats {
  double assembly_seconds = 0, factor_seconds = 0, solve_seconds = 0;
  Index solves = 0;
  double backward_error_before = 0, backward_error_after = 0;  // the largest η of (1)/(2), before and after refinement
  Index refinements = 0;  // the most refinement steps one solve took
  Index singular_piece = -1;  // the first D_k with an exactly zero pivot (−1: none)
  Index zero_pivot = -1;      // j of that D_k's first zero pivot U(j, j)
  double null_residual_before = 0, null_residual_after = 0;  // ‖A x‖ / ‖x‖ of (4), and after (5)
  Index null_steps = 0;                                       // (5)'s steps
  bool factors_not_finite = false;  // the last piece's factors past its zero pivot are NaN/inf: no (5)
};

/// lu_lanczos_extremes' backend (lu_lanczos.h's concept) by the block factorisation above.
/// gram() is the map's two products; factor() forms and factorises D_0 … D_p−1; inverse_gram() is
/// (2) then (1) with A = A^(p), each refined. Vectors cross to the Store's memory per solve
/// (N doubles each way against the Σ s_k² entries a solve reads there).
template <typename Store>
class SchurLuBackend {
 public:
  /// `checkpoint` (optional) is called before each panel of each D_k and each solve: the caller's
  /// cancellation point inside the route (it may throw to abandon it; one LU call runs to its end).
  SchurLuBackend(Store& store, const TokenMap& map, const SchurPlan& plan, std::function<void()> checkpoint = {})
      : store_(store), map_(map), plan_(checked(plan, map)), checkpoint_(std::move(checkpoint)),
        columns_(store.alloc(panel_count())), x_(store.alloc(static_cast<size_t>(plan.order))) {
    pieces_.reserve(plan_.pieces());
    levels_.reserve(plan_.pieces());
    for (Index k = 0; k < plan_.pieces(); ++k) {
      pieces_.push_back(Piece{store.alloc(static_cast<size_t>(plan_.size(k)) * plan_.size(k)), store.pivots(plan_.size(k))});
      const size_t level = k == 0 ? 0 : panel_count();  // piece 0 has no level of its own
      levels_.push_back(Level{store.alloc(level), store.alloc(level)});
    }
  }
  Index order() const { return plan_.order; }
  const SchurStats& stats() const { return stats_; }

  void gram(const double* x, double* y) {
    const Mat Ax = map_.apply(Eigen::Map<const Mat>(x, map_.n(), map_.d_in()));
    const Mat AtAx = map_.apply_transpose(Ax);
    std::copy(AtAx.data(), AtAx.data() + plan_.order, y);
  }

  FactorOutcome factor(double sigma_max) {
    sigma_max_ = sigma_max;
    for (Index k = 0; k < plan_.pieces(); ++k) {
      auto t = std::chrono::steady_clock::now();
      form_piece(k);
      stats_.assembly_seconds += seconds_since(t);
      t = std::chrono::steady_clock::now();
      const FactorOutcome f = store_.lu_factor(pieces_[k].lu.get(), plan_.size(k), pieces_[k].pivots, &stats_.zero_pivot);
      stats_.factor_seconds += seconds_since(t);
      if (f == FactorOutcome::kExactlySingular) {
        stats_.singular_piece = k;
        return f;
      }
    }
    return FactorOutcome::kFactored;
  }

  /// y = (AᵀA)⁻¹ x = A⁻¹ (A⁻ᵀ x): (2), then (1).
  void inverse_gram(const double* x, double* y) {
    const Vec xv = Eigen::Map<const Vec>(x, plan_.order);
    if (!xv.allFinite()) throw NonFiniteSolve();
    if (checkpoint_) checkpoint_();
    const auto t = std::chrono::steady_clock::now();
    const Vec z = refined_solve(xv, true);
    const Vec out = refined_solve(z, false);
    stats_.solve_seconds += seconds_since(t);
    if (!out.allFinite()) throw NonFiniteSolve();
    std::copy(out.data(), out.data() + plan_.order, y);
  }

  /// (4): x with A x = 0 in exact arithmetic on the factors, after factor() met a zero pivot in the
  /// last piece (not normalised). Throws std::logic_error otherwise.
  Vec null_vector() {
    const Index K = plan_.pieces() - 1, N = plan_.order, c = plan_.begin(K), s = plan_.size(K), j = stats_.zero_pivot;
    if (stats_.singular_piece != K || j < 0 || j >= s)
      throw std::logic_error("SchurLuBackend::null_vector: the last piece has no zero pivot");
    double* x = x_.get();
    const double* lu = pieces_[K].lu.get();
    store_.zero(N, 1, x, N);
    if (j > 0) {
      store_.subtract(j, 1, x + c, N, lu + j * s, s, x + c, N);  // −u
      store_.upper_solve(lu, s, j, x + c);                       // −U11⁻¹ u
    }
    const double one = 1.0;
    store_.upload(&one, x + c + j, 1);  // x = [0; v]
    double* product = levels_[K].product.get();
    apply(x, 1, product, false);                          // top c rows: A12 v
    solve_leading(K - 1, false, product, N, 1);           // (A^(p−1))⁻¹ A12 v
    store_.subtract(c, 1, x, N, product, N, x, N);        // x1 = 0 − (A^(p−1))⁻¹ A12 v
    Vec out(N);
    store_.download(x, out.data(), N);
    return out;
  }

  /// (5): x0 refined in the Krylov space of M A, M the solve (1) with the factors as they stand
  /// (nonsingular); unit norm; stops once ‖A x‖ is a tenth of `floor` (the noise floor), or after
  /// `steps` steps (0: x0's residual only).
  Vec refine_null_vector(const Vec& x0, double floor, Index steps = kSchurNullVectorSteps) {
    const Index N = plan_.order;
    Mat V(N, kSchurNullVectorSteps + 1), AV(N, kSchurNullVectorSteps + 1);
    V.col(0) = x0.normalized();
    AV.col(0) = apply_vector(map_, V.col(0));
    stats_.null_residual_before = stats_.null_residual_after = AV.col(0).norm();
    stats_.null_steps = 0;
    Vec best = V.col(0);
    if (!V.col(0).allFinite() || !AV.col(0).allFinite() || stats_.null_residual_after <= 0.1 * floor) return best;
    for (Index m = 1; m <= std::min(steps, kSchurNullVectorSteps); ++m) {
      if (checkpoint_) checkpoint_();
      Vec w = block_solve(AV.col(m - 1), false);  // M A v
      for (int pass = 0; pass < 2; ++pass) w -= V.leftCols(m) * (V.leftCols(m).transpose() * w);
      if (!w.allFinite() || !(w.norm() > 0)) break;
      V.col(m) = w.normalized();
      AV.col(m) = apply_vector(map_, V.col(m));
      stats_.null_steps = m;
      const Eigen::JacobiSVD<Mat> svd(AV.leftCols(m + 1), Eigen::ComputeThinV);
      const Vec x = V.leftCols(m + 1) * svd.matrixV().col(m);  // σ_min's right vector (unit: V orthonormal)
      const double residual = apply_vector(map_, x).norm() / x.norm();
      if (residual < stats_.null_residual_after) {
        best = x.normalized();
        stats_.null_residual_after = residual;
      }
      if (stats_.null_residual_after <= 0.1 * floor) break;
    }
    return best;
  }

  /// (4) refined by (5), after factor() met a zero pivot in the last piece: that piece's zero
  /// pivots are set to δ = eps·σ_max first (the route is over; nothing else reads them). Where
  /// the factors past the pivot are not finite (an LU that divided by it), (4) alone: it reads
  /// only U's rows above the pivot.
  Vec refined_null_vector(double floor) {
    const Vec x0 = null_vector();
    const Index K = plan_.pieces() - 1;
    const Index replaced =
        store_.replace_zero_pivots(pieces_[K].lu.get(), plan_.size(K), std::numeric_limits<double>::epsilon() * sigma_max_);
    stats_.factors_not_finite = replaced < 0;
    return refine_null_vector(x0, floor, stats_.factors_not_finite ? 0 : kSchurNullVectorSteps);
  }

 private:
  struct Piece {
    typename Store::Buffer lu;  // D_k, then its LU factors (s_k × s_k)
    typename Store::Pivots pivots;
  };
  struct Level {  // the padded inputs and the products of (1)–(3) at one piece (N × panel each)
    typename Store::Buffer padded, product;
  };

  // The plan, if it fits the map (checked before anything is allocated).
  static const SchurPlan& checked(const SchurPlan& plan, const TokenMap& map) {
    if (map.n() * map.d_in() != plan.order || map.d_in() != map.d_out())
      throw std::invalid_argument("SchurLuBackend: the plan's order does not match the square map");
    if (plan.pieces() < 2) throw std::invalid_argument("SchurLuBackend: the route needs two pieces or more");
    if (plan.panel < 1) throw std::invalid_argument("SchurLuBackend: a panel needs a column");
    for (Index k = 0; k < plan.pieces(); ++k)
      if (plan.size(k) < 1) throw std::invalid_argument("SchurLuBackend: the cuts must rise inside (0, order)");
    return plan;
  }
  size_t panel_count() const { return static_cast<size_t>(plan_.order) * plan_.panel; }

  // out = A in (transposed: Aᵀ in) for `count` columns of N in the Store's memory. Aᵀ goes a vector
  // at a time through the host (TokenMap has no apply_transpose_columns; only (2) takes it).
  void apply(const double* in, Index count, double* out, bool transposed) {
    if (!transposed) {
      require(map_.apply_columns(in, count, out), "apply itself to a panel");
      return;
    }
    const Index N = plan_.order;
    Vec host(N);
    for (Index j = 0; j < count; ++j) {
      store_.download(in + j * N, host.data(), N);
      const Mat r = map_.apply_transpose(Eigen::Map<const Mat>(host.data(), map_.n(), map_.d_in()));
      store_.upload(r.data(), out + j * N, N);
    }
  }

  // (3): D_k a panel of columns at a time (D_0: A's leading block itself).
  void form_piece(Index k) {
    const Index N = plan_.order, c = plan_.begin(k), s = plan_.size(k);
    double* d = pieces_[k].lu.get();
    for (Index j0 = 0; j0 < s; j0 += plan_.panel) {
      if (checkpoint_) checkpoint_();
      const Index w = std::min(plan_.panel, s - j0);
      require(map_.assemble_columns(c + j0, w, columns_.get()), "assemble its columns");  // A [0; E; 0]
      if (k == 0) {
        store_.copy(s, w, columns_.get(), N, d + j0 * s, s);
        continue;
      }
      solve_leading(k - 1, false, columns_.get(), N, w);  // top c rows: Y = (A^(k))⁻¹ A12 E
      Level& l = levels_[k];
      pad(columns_.get(), N, 0, c, w, l.padded.get());  // [Y; 0]
      apply(l.padded.get(), w, l.product.get(), false);
      store_.subtract(s, w, columns_.get() + c, N, l.product.get() + c, N, d + j0 * s, s);  // A22 E − A21 Y
    }
  }

  // dst (N × w, leading dimension N) = rows [first, first + rows) of src in place, zero elsewhere.
  void pad(const double* src, Index ld_src, Index first, Index rows, Index w, double* dst) {
    const Index N = plan_.order;
    store_.zero(N, w, dst, N);
    store_.copy(rows, w, src + first, ld_src, dst + first, N);
  }

  // B ← (A^(k+1))⁻¹ B (transposed: (A^(k+1))⁻ᵀ B) for the top c_k+1 rows of w columns of leading
  // dimension ld: (1) or (2) at piece k, A^(k)'s solves by recursion. Uses levels_[1 … k].
  void solve_leading(Index k, bool transposed, double* B, Index ld, Index w) {
    if (k == 0) {
      store_.lu_solve(pieces_[0].lu.get(), plan_.size(0), pieces_[0].pivots, transposed, B, w, ld);
      return;
    }
    const Index N = plan_.order, c = plan_.begin(k), s = plan_.size(k);
    Level& l = levels_[k];
    solve_leading(k - 1, transposed, B, ld, w);  // u = (A^(k))⁻¹ b1
    pad(B, ld, 0, c, w, l.padded.get());
    apply(l.padded.get(), w, l.product.get(), transposed);
    store_.subtract(s, w, B + c, ld, l.product.get() + c, N, B + c, ld);  // b2 − A21 u
    store_.lu_solve(pieces_[k].lu.get(), s, pieces_[k].pivots, transposed, B + c, w, ld);  // x2
    pad(B, ld, c, s, w, l.padded.get());
    apply(l.padded.get(), w, l.product.get(), transposed);  // top c rows: A12 x2
    solve_leading(k - 1, transposed, l.product.get(), N, w);
    store_.subtract(c, w, B, ld, l.product.get(), N, B, ld);  // x1 = u − (A^(k))⁻¹ A12 x2
  }

  void require(bool done, const std::string& what) const {
    if (!done) throw std::invalid_argument("the Schur route needs a map that can " + what + " where it runs");
  }

  // (1) (transposed: (2)) with A = A^(p), unrefined.
  Vec block_solve(const Vec& b, bool transposed) {
    const Index N = plan_.order;
    store_.upload(b.data(), x_.get(), N);
    solve_leading(plan_.pieces() - 1, transposed, x_.get(), N, 1);
    Vec x(N);
    store_.download(x_.get(), x.data(), N);
    return x;
  }

  // The normwise backward error of x as a solution of A x = b (Aᵀ x = b).
  double backward_error(const Vec& b, const Vec& x, bool transposed, Vec* residual) const {
    const Eigen::Map<const Mat> tokens(x.data(), map_.n(), map_.d_in());
    const Mat Ax = transposed ? map_.apply_transpose(tokens) : map_.apply(tokens);
    *residual = b - Eigen::Map<const Vec>(Ax.data(), plan_.order);
    const double scale = sigma_max_ * x.norm() + b.norm();
    return scale > 0 ? residual->norm() / scale : 0.0;
  }

  // x = A⁻¹ b (A⁻ᵀ b), refined as the header says. The first step is kept whenever it is finite
  // (one step is the fixed-precision scheme's own; η can rise at rounding level), a later one only
  // where it lowers η; `refinements` counts the steps kept.
  Vec refined_solve(const Vec& b, bool transposed) {
    ++stats_.solves;
    Vec x = block_solve(b, transposed), r;
    double eta = backward_error(b, x, transposed, &r);
    stats_.backward_error_before = std::max(stats_.backward_error_before, eta);
    if (!x.allFinite() || !r.allFinite()) throw NonFiniteSolve();
    Index kept = 0;
    for (Index step = 1; step <= kSchurMaxRefinements; ++step) {
      Vec next = x + block_solve(r, transposed), next_r;
      const double next_eta = backward_error(b, next, transposed, &next_r);
      if (!next.allFinite() || !next_r.allFinite() || (step > 1 && !(next_eta < eta))) break;
      const bool halved = next_eta <= 0.5 * eta;
      x = std::move(next);
      r = std::move(next_r);
      eta = next_eta;
      kept = step;
      if (eta <= kSchurBackwardErrorTarget || !halved) break;
    }
    stats_.refinements = std::max(stats_.refinements, kept);
    stats_.backward_error_after = std::max(stats_.backward_error_after, eta);
    return x;
  }

  Store& store_;
  const TokenMap& map_;
  const SchurPlan plan_;
  const std::function<void()> checkpoint_;
  typename Store::Buffer columns_, x_;  // a panel of A's columns; the vector a solve works on
  std::vector<Piece> pieces_;
  std::vector<Level> levels_;  // levels_[k] for k ≥ 1 (levels_[0] is empty)
  double sigma_max_ = 0;
  SchurStats stats_;
};

/// One line for the note: "block LU in p pieces split at c_1, … of N (the pieces' Schur complements
/// dense, off-diagonal blocks matrix-free): assembly a s, LU f s, k solves t s (refined in at most
/// r steps), backward error <= η (η₀ unrefined)".
inline std::string describe(const SchurPlan& p, const SchurStats& s) {
  std::ostringstream os;
  os.precision(3);
  os << "block LU in " << p.pieces() << " pieces split at ";
  for (size_t k = 0; k < p.cuts.size(); ++k) os << (k ? ", " : "") << p.cuts[k];
  os << " of " << p.order << " (the pieces' Schur complements dense, off-diagonal blocks matrix-free): assembly "
     << s.assembly_seconds << " s, LU " << s.factor_seconds << " s, " << s.solves << " solves " << s.solve_seconds
     << " s (refined in at most " << s.refinements << (s.refinements == 1 ? " step" : " steps")
     << "), backward error <= " << s.backward_error_after << " (" << s.backward_error_before
     << " unrefined)";
  return os.str();
}

/// Why a zero pivot before the last piece of `plan` (piece `k`) stops the route: the one assumption.
inline std::string zero_pivot_note(const SchurPlan& plan, Index k) {
  return "a pivot of the leading " + std::to_string(plan.end(k)) + " x " + std::to_string(plan.end(k)) +
         " block's factorisation is exactly zero: these cuts do not factorise the matrix";
}

/// r (σ_max set) from a unit vector x that should be a null vector of A (`found` says whence, for
/// the note; `s` holds (5)'s residuals), judged by the operator: singular where ‖A x‖ ≤ the noise
/// floor (σ_min ≤ ‖A x‖), else not-converged with the bound κ ≥ σ_max / (‖A x‖ + floor) x gives.
inline void judge_null_vector(ConditionReport& r, const Vec& x, const SchurStats& s, const TokenMap& map,
                              const std::string& found) {
  const double floor = noise_floor(r.rows, r.cols, r.sigma_max);
  const double residual = apply_vector(map, x).norm() / x.norm();
  std::ostringstream os;
  os.precision(6);
  os << found << " has ||A x|| / ||x|| = " << residual << " (" << s.null_residual_before << " unrefined, "
     << s.null_steps << (s.null_steps == 1 ? " refinement step" : " refinement steps")
     << (s.factors_not_finite ? "; the factors past the zero pivot are not finite: not refined)" : ")");
  if (std::isfinite(residual) && residual <= floor) {
    r.sigma_min = residual;
    finish_extremes_report(r);  // singular: σ_min ≤ the floor
    os << " <= the noise floor " << floor << ": singular to working precision (rank unknown: the Schur route has no SVD)";
    r.note = os.str();
    return;
  }
  os << ", above the noise floor " << floor << ": the factors are too far from A to tell";
  finish_not_converged_report(r, os.str());
  if (std::isfinite(residual)) {  // σ_min ≤ ‖A x‖ / ‖x‖ up to the product's rounding
    r.kappa_lo = r.sigma_max / (residual + floor);
    r.kappa_hi = std::numeric_limits<double>::infinity();
  }
}

/// κ of `map` (square) by the Schur route on `store`: status exact or singular with method
/// `method`, or not-converged (κ NaN) with a note saying why: a zero pivot before the last piece
/// (the assumption fails), Lanczos did not converge, or the check of σ_min failed. A singular
/// claim stands on a null vector the operator confirms (judge_null_vector): the solves' Ritz
/// vector, refined by (5) where the check needs it, or after a zero pivot in the last piece (4)'s,
/// refined by (5); one it does not confirm is not-converged with the bound κ_lo it gives.
/// Where the product overflows or the store fails, what they throw.
template <typename Store>
ConditionReport condition_schur_with(Store& store, const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                     const std::string& method, const std::function<void()>& checkpoint = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  ConditionReport r;
  r.matrix = matrix;
  r.rows = r.cols = plan.order;
  r.method = method;
  SchurLuBackend<Store> backend(store, map, plan, checkpoint);
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  r.products = e.products;
  r.sigma_max = e.sigma_max;
  const double floor = noise_floor(plan.order, plan.order, e.sigma_max);
  std::string unsupported;
  if (e.outcome == LuLanczosExtremes::Outcome::kOk) {
    unsupported = unsupported_sigma_min(e, apply_vector(map, e.v_min).norm(), floor);
  }
  const SchurStats& s = backend.stats();
  if (e.outcome == LuLanczosExtremes::Outcome::kOk && unsupported.empty()) {
    r.sigma_min = e.sigma_min;
    finish_extremes_report(r);
    if (r.status == Status::kSingular) r.note = "rank unknown (the Schur route has no SVD)";
  } else if (e.outcome == LuLanczosExtremes::Outcome::kOk && e.sigma_min <= floor) {  // a singular claim
    judge_null_vector(r, backend.refine_null_vector(e.v_min, floor), s, map,
                      unsupported + "; that vector x, refined against the operator,");
  } else if (s.singular_piece == plan.pieces() - 1) {
    judge_null_vector(r, backend.refined_null_vector(floor), s, map,
                      "a pivot of the last Schur complement is exactly zero; its null vector x");
  } else {
    finish_not_converged_report(r, !unsupported.empty()    ? unsupported
                                   : s.singular_piece >= 0 ? zero_pivot_note(plan, s.singular_piece)
                                   : !e.why.empty()        ? e.why
                                                           : "lanczos did not converge (or the matrix is numerically singular)");
  }
  r.note += std::string(r.note.empty() ? "" : "; ") + describe(plan, s);
  r.seconds = seconds_since(t0);
  return r;
}

/// The host's Store: std::vector buffers, LAPACKE dgetrf / dgetrs. For maps whose products run in
/// host memory (TokenMap::assembles_into() == "cpu"); the route's reference in CI.
class CpuSchurStore {
 public:
  struct Buffer {
    std::vector<double> data;
    double* get() { return data.data(); }
  };
  using Pivots = std::vector<int>;
  Buffer alloc(size_t count) { return Buffer{std::vector<double>(count)}; }
  Pivots pivots(Index m) { return Pivots(static_cast<size_t>(m)); }
  void copy(Index rows, Index cols, const double* src, Index ld_src, double* dst, Index ld_dst);
  void zero(Index rows, Index cols, double* dst, Index ld);
  void subtract(Index rows, Index cols, const double* a, Index lda, const double* b, Index ldb, double* c, Index ldc);
  void upload(const double* host, double* dst, Index count) { std::copy(host, host + count, dst); }
  void download(const double* src, double* host, Index count) { std::copy(src, src + count, host); }
  FactorOutcome lu_factor(double* a, Index m, Pivots& p, Index* zero_pivot);
  void lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs, Index ldb);
  void upper_solve(const double* lu, Index m, Index k, double* b);
  Index replace_zero_pivots(double* lu, Index m, double value);
};

/// The Schur route on the host (method "dense-schur-lu-lanczos"), for a map that assembles into
/// host memory; std::invalid_argument for another. `checkpoint`: SchurLuBackend's.
ConditionReport condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                const std::function<void()>& checkpoint = {});

}  // namespace jacond
