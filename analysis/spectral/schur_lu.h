// κ of a square operator too large for one dense LU where its products run: a 2 × 2 block
// factorisation whose diagonal blocks are dense and whose off-diagonal blocks stay matrix-free.
// condition_fast's algorithm (lu_lanczos.h) with this factorisation as its backend; written once
// for every device, a Store supplying the memory and the LU.
//
// Math. Split the N × N operator A at m: A = [A11 A12; A21 A22], A11 m × m, and let
//   S = A22 − A21 A11⁻¹ A12                                  (the Schur complement, (N − m)²)
// so that A = [I 0; A21 A11⁻¹ I] [A11 A12; 0 S] and
//   A x = b:   x2 = S⁻¹ (b2 − A21 A11⁻¹ b1),   x1 = A11⁻¹ (b1 − A12 x2)            (1)
//   Aᵀ z = c:  z2 = S⁻ᵀ (c2 − A12ᵀ A11⁻ᵀ c1),  z1 = A11⁻ᵀ (c1 − A21ᵀ z2)            (2)
// (Aᵀ's Schur complement on A11ᵀ is Sᵀ). A21 u, A12 w and their transposes are the operator's own
// products with padded vectors, A [u; 0] = [A11 u; A21 u] and A [0; w] = [A12 w; A22 w], so only
// A11 and S are stored, as LU factors with partial pivoting: m² + (N − m)² entries, least at
// m = N/2, half of N². ViT-B's K_sa (N = 151 296): 91.6 GB of fp64 where A is 183 GB, on one H200
// (issue 11, item 3). S is formed a column panel E (unit columns) at a time, storing neither A12
// nor A21:
//   [A12 E; A22 E] = A [0; E],   Y = A11⁻¹ (A12 E),   S E = A22 E − bottom(A [Y; 0])        (3)
// Cost: products of m + 2(N − m) inputs (1.5 N at m = N/2; the full assembly takes N), two LUs
// (⅔ m³ + ⅔ (N − m)³) and (3)'s solves (2 m² (N − m)): 5/12 N³ flops at m = N/2 against the full
// LU's ⅔ N³. A solve (1) or (2) is three triangular-pair solves and two products.
//
// Accuracy. Partial pivoting stays inside A11 and inside S: the elimination across the split is
// pivot-free, backward stable when ‖A21 A11⁻¹‖ and ‖A11⁻¹ A12‖ are moderate (Higham, Accuracy and
// Stability of Numerical Algorithms, §13.2) and not in general. So every solve is refined once in
// fp64 against the operator (x ← x + solve(b − A x), the product matrix-free: fixed-precision
// refinement, ibid. §12.2) and its normwise backward error η = ‖b − A x‖ / (σ_max ‖x‖ + ‖b‖) is
// measured after the refinement by one more product; the note states the largest η of the run.
// What certifies σ_min is lu_lanczos.h's one check, ‖A v_min‖ by the operator: a failed check
// (the solves' σ_min below its own vector's ‖A v‖) is reported not-converged, never as a κ.
//
// The one assumption: A11 is nonsingular. A zero pivot of A11 says nothing about A (a permutation
// matrix can have A11 = 0), so it is reported not-converged with a note; a zero pivot of S means A
// is singular to working precision (det A = det A11 · det S), also not-converged here, since the
// SVD that answers it on the full route does not fit where this route is used.
//
// Store concept (host: CpuSchurStore below, LAPACKE; CUDA: analysis/cuda/dense_cuda.cpp, cuSOLVER):
//   Buffer alloc(size_t count)                           count doubles in the map's memory; .get()
//   void copy(Index rows, Index cols, const double* src, Index ld_src, double* dst, Index ld_dst)
//   void zero(Index rows, Index cols, double* dst, Index ld)
//   void subtract(Index rows, Index cols, const double* a, Index lda, const double* b, Index ldb,
//                 double* c, Index ldc)                  c = a − b
//   void upload(const double* host, double* dst, Index count), download(const double* src, double* host, Index count)
//   Pivots pivots(Index m)
//   FactorOutcome lu_factor(double* a, Index m, Pivots& p)          in place, leading dimension m
//   void lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs, Index ldb)
// The map (analysis/operators/operator_device.h) must assemble_columns and apply_columns in the
// Store's memory (TokenMap::assembles_into).
//
// Guarded by tests/models/test_operator_device.cpp (SchurRoute*: the route on the CPU, with
// LibTorch's CPU maps and the host store, against condition_fast of the assembled matrix for every
// attention operator and skip mode, at several splits; the zero-A11 outcome) and, on a GPU, by
// OperatorDeviceCuda.SchurRouteAgreesWithTheHostsFullLu.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analysis/core/clock.h"
#include "analysis/core/types.h"
#include "analysis/operators/operator_device.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/lu_lanczos.h"

namespace jacond {

/// Where the route splits and how wide its panels are.
struct SchurPlan {
  Index order = 0;  // N
  Index split = 0;  // m: A11 is m × m, S (N − m) × (N − m)
  Index panel = 0;  // columns of (3) formed at once

  /// The plan of an N × N operator: m = N/2 (least storage), panels of `panel_bytes` (three
  /// N × w buffers: [A12 E; A22 E], [Y; 0], its product).
  static SchurPlan for_order(Index order, double panel_bytes = 2e9) {
    SchurPlan p;
    p.order = order;
    p.split = order / 2;
    p.panel = static_cast<Index>(std::clamp(std::floor(panel_bytes / (24.0 * static_cast<double>(order))), 1.0,
                                            static_cast<double>(std::max<Index>(1, order - p.split))));
    return p;
  }
  /// Bytes the route holds where the map's products run: A11, S and the three panels (the map's
  /// own batch intermediates and the LU workspace are the caller's to add).
  double bytes() const {
    const double m = static_cast<double>(split), s = static_cast<double>(order - split);
    return 8.0 * (m * m + s * s + 3.0 * static_cast<double>(order) * static_cast<double>(panel));
  }
};

/// What a run of the route saw, for the report's note.
struct SchurStats {
  double assembly_seconds = 0, factor_seconds = 0, solve_seconds = 0;
  Index solves = 0;
  double backward_error_before = 0, backward_error_after = 0;  // the largest η of (1)/(2), before and after refinement
  bool a11_singular = false;  // a pivot of A11 is exactly zero (the assumption fails)
};

/// lu_lanczos_extremes' backend (lu_lanczos.h's concept) by the 2 × 2 block factorisation above.
/// gram() is the map's two products; factor() forms and factorises A11 and S; inverse_gram() is
/// (2) then (1), each refined once. Vectors cross to the Store's memory per solve (N doubles each
/// way against the m² + (N − m)² entries a solve reads there).
template <typename Store>
class SchurLuBackend {
 public:
  /// `checkpoint` (optional) is called before each panel of A11 and S and each solve: the caller's
  /// cancellation point inside the route (it may throw to abandon it; one LU call runs to its end).
  SchurLuBackend(Store& store, const TokenMap& map, const SchurPlan& plan, std::function<void()> checkpoint = {})
      : store_(store), map_(map), plan_(checked(plan, map)), checkpoint_(std::move(checkpoint)), m_(plan.split),
        s_(plan.order - plan.split),
        a11_(store.alloc(static_cast<size_t>(m_) * m_)), schur_(store.alloc(static_cast<size_t>(s_) * s_)),
        p11_(store.pivots(m_)), ps_(store.pivots(s_)), v_(store.alloc(static_cast<size_t>(std::max(m_, s_)))) {}
  Index order() const { return plan_.order; }
  const SchurStats& stats() const { return stats_; }

  void gram(const double* x, double* y) {
    const Mat Ax = map_.apply(as_tokens(x));
    const Mat AtAx = map_.apply_transpose(Ax);
    std::copy(AtAx.data(), AtAx.data() + plan_.order, y);
  }

  FactorOutcome factor(double sigma_max) {
    sigma_max_ = sigma_max;
    auto t = std::chrono::steady_clock::now();
    assemble_a11();
    stats_.assembly_seconds += seconds_since(t);
    t = std::chrono::steady_clock::now();
    if (store_.lu_factor(a11_.get(), m_, p11_) == FactorOutcome::kExactlySingular) {
      stats_.a11_singular = true;
      return FactorOutcome::kExactlySingular;
    }
    stats_.factor_seconds += seconds_since(t);
    t = std::chrono::steady_clock::now();
    form_schur_complement();
    stats_.assembly_seconds += seconds_since(t);
    t = std::chrono::steady_clock::now();
    const FactorOutcome s = store_.lu_factor(schur_.get(), s_, ps_);
    stats_.factor_seconds += seconds_since(t);
    return s;
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

 private:
  // The plan, if it fits the map (checked before anything is allocated).
  static const SchurPlan& checked(const SchurPlan& plan, const TokenMap& map) {
    if (map.n() * map.d_in() != plan.order || map.d_in() != map.d_out())
      throw std::invalid_argument("SchurLuBackend: the plan's order does not match the square map");
    if (plan.split < 1 || plan.split >= plan.order || plan.panel < 1)
      throw std::invalid_argument("SchurLuBackend: split or panel out of range");
    return plan;
  }
  Eigen::Map<const Mat> as_tokens(const double* x) const { return Eigen::Map<const Mat>(x, map_.n(), map_.d_in()); }
  Vec product(const Vec& x, bool transposed) const {
    const Mat r = transposed ? map_.apply_transpose(as_tokens(x.data())) : map_.apply(as_tokens(x.data()));
    return Eigen::Map<const Vec>(r.data(), plan_.order);
  }

  // A11 = the top m rows of A's first m columns, a panel at a time.
  void assemble_a11() {
    const Index N = plan_.order;
    auto columns = store_.alloc(static_cast<size_t>(N) * plan_.panel);
    for (Index j0 = 0; j0 < m_; j0 += plan_.panel) {
      if (checkpoint_) checkpoint_();
      const Index w = std::min(plan_.panel, m_ - j0);
      require(map_.assemble_columns(j0, w, columns.get()), "assemble its columns");
      store_.copy(m_, w, columns.get(), N, a11_.get() + static_cast<size_t>(j0) * m_, m_);
    }
  }

  // (3), a panel of S's columns at a time.
  void form_schur_complement() {
    const Index N = plan_.order;
    const size_t panel = static_cast<size_t>(N) * plan_.panel;
    auto columns = store_.alloc(panel), padded = store_.alloc(panel), product = store_.alloc(panel);
    for (Index k0 = 0; k0 < s_; k0 += plan_.panel) {
      if (checkpoint_) checkpoint_();
      const Index w = std::min(plan_.panel, s_ - k0);
      require(map_.assemble_columns(m_ + k0, w, columns.get()), "assemble its columns");  // [A12 E; A22 E]
      store_.lu_solve(a11_.get(), m_, p11_, false, columns.get(), w, N);                 // top: Y = A11⁻¹ A12 E
      store_.copy(m_, w, columns.get(), N, padded.get(), N);
      store_.zero(s_, w, padded.get() + m_, N);                                          // [Y; 0]
      require(map_.apply_columns(padded.get(), w, product.get()), "apply itself to a panel");
      store_.subtract(s_, w, columns.get() + m_, N, product.get() + m_, N, schur_.get() + static_cast<size_t>(k0) * s_, s_);
    }
  }

  void require(bool done, const std::string& what) const {
    if (!done) throw std::invalid_argument("the Schur route needs a map that can " + what + " where it runs");
  }

  // One triangular-pair solve in the Store: v ← M⁻¹ v or M⁻ᵀ v for M = A11 or S.
  Vec solve_block(const Vec& v, bool schur, bool transposed) {
    const Index k = schur ? s_ : m_;
    store_.upload(v.data(), v_.get(), k);
    store_.lu_solve(schur ? schur_.get() : a11_.get(), k, schur ? ps_ : p11_, transposed, v_.get(), 1, k);
    Vec out(k);
    store_.download(v_.get(), out.data(), k);
    return out;
  }

  // (1) (transposed: (2)), unrefined.
  Vec block_solve(const Vec& b, bool transposed) {
    const Index N = plan_.order;
    Vec padded = Vec::Zero(N);
    padded.head(m_) = solve_block(b.head(m_), false, transposed);                   // A11⁻¹ b1 (A11⁻ᵀ c1)
    const Vec lower = b.tail(s_) - product(padded, transposed).tail(s_);            // b2 − A21 A11⁻¹ b1
    Vec x(N);
    x.tail(s_) = solve_block(lower, true, transposed);                              // x2
    padded.setZero();
    padded.tail(s_) = x.tail(s_);
    x.head(m_) = solve_block(b.head(m_) - product(padded, transposed).head(m_), false, transposed);  // x1
    return x;
  }

  // The normwise backward error of x as a solution of A x = b (Aᵀ x = b).
  double backward_error(const Vec& b, const Vec& x, bool transposed, Vec* residual) const {
    *residual = b - product(x, transposed);
    const double scale = sigma_max_ * x.norm() + b.norm();
    return scale > 0 ? residual->norm() / scale : 0.0;
  }

  Vec refined_solve(const Vec& b, bool transposed) {
    ++stats_.solves;
    Vec x = block_solve(b, transposed), r;
    stats_.backward_error_before = std::max(stats_.backward_error_before, backward_error(b, x, transposed, &r));
    if (!x.allFinite() || !r.allFinite()) throw NonFiniteSolve();
    x += block_solve(r, transposed);
    stats_.backward_error_after = std::max(stats_.backward_error_after, backward_error(b, x, transposed, &r));
    return x;
  }

  Store& store_;
  const TokenMap& map_;
  const SchurPlan plan_;
  const std::function<void()> checkpoint_;
  const Index m_, s_;
  typename Store::Buffer a11_, schur_;
  typename Store::Pivots p11_, ps_;
  typename Store::Buffer v_;
  double sigma_max_ = 0;
  SchurStats stats_;
};

/// One line for the note: "2x2 block LU split at m (A11 m², Schur complement s², off-diagonal
/// blocks matrix-free): assembly a s, LU f s, solves t s (k, each refined once), backward error
/// <= η (η₀ unrefined)".
inline std::string describe(const SchurPlan& p, const SchurStats& s) {
  std::ostringstream os;
  os.precision(3);
  os << "2x2 block LU split at " << p.split << " of " << p.order
     << " (A11 and the Schur complement dense, off-diagonal blocks matrix-free): assembly " << s.assembly_seconds
     << " s, LU " << s.factor_seconds << " s, " << s.solves << " solves (each refined once) " << s.solve_seconds
     << " s, backward error <= " << s.backward_error_after << " (" << s.backward_error_before << " unrefined)";
  return os.str();
}

/// κ of `map` (square) by the Schur route on `store`: status exact or singular
/// (finish_extremes_report) with method `method`, or not-converged (κ NaN) with a note saying why:
/// A11 has an exactly zero pivot (the assumption fails), S has one (A singular to working
/// precision), Lanczos did not converge, or the check of σ_min failed. Where the product overflows
/// or the store fails, what they throw.
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
  std::string unsupported;
  if (e.outcome == LuLanczosExtremes::Outcome::kOk) {
    const Mat Av = map.apply(Eigen::Map<const Mat>(e.v_min.data(), map.n(), map.d_in()));
    unsupported = unsupported_sigma_min(e, Av.norm(), noise_floor(plan.order, plan.order, e.sigma_max));
  }
  const SchurStats& s = backend.stats();
  if (e.outcome == LuLanczosExtremes::Outcome::kOk && unsupported.empty()) {
    r.sigma_min = e.sigma_min;
    finish_extremes_report(r);
  } else {
    finish_not_converged_report(
        r, !unsupported.empty() ? unsupported
           : s.a11_singular     ? "a pivot of A11 is exactly zero: this split does not factorise the matrix"
           : e.outcome == LuLanczosExtremes::Outcome::kExactlySingular
               ? "a pivot of the Schur complement is exactly zero: singular to working precision (no SVD at this size)"
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
  FactorOutcome lu_factor(double* a, Index m, Pivots& p);
  void lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs, Index ldb);
};

/// The Schur route on the host (method "dense-schur-lu-lanczos"), for a map that assembles into
/// host memory; std::invalid_argument for another. `checkpoint`: SchurLuBackend's.
ConditionReport condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                const std::function<void()>& checkpoint = {});

}  // namespace jacond
