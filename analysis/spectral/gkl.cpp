// Thick-restart Golub–Kahan–Lanczos with certified brackets; the math is in analysis/spectral/gkl.h.
#include "analysis/core/clock.h"
#include "analysis/spectral/gkl.h"

#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "analysis/core/lapack.h"
#include "analysis/operators/krylov_basis.h"

namespace jacond {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kInf = std::numeric_limits<double>::infinity();


enum class Which { kLargest, kSmallest };

struct Budget {
  Clock::time_point start;
  double max_seconds;
  Index max_products;
  Index used = 0;
  bool exhausted(Index next) const { return used + next > max_products || seconds_since(start) > max_seconds; }
};

// σ(K) = σ(Kᵀ): the iteration works on the tall (or square) side, rows ≥ cols, so that
// σ_min = σ_cols and the one-sided Courant–Fischer bound σ_min ≤ θ_min holds.
OperatorRef tall_side(const OperatorRef& op) {
  if (op.rows >= op.cols) return op;
  OperatorRef t;
  t.rows = op.cols;
  t.cols = op.rows;
  t.apply = op.apply_transpose;
  t.apply_transpose = op.apply;
  return t;
}

void check_operator(const OperatorRef& op) {
  if (op.rows <= 0 || op.cols <= 0) throw std::invalid_argument("gkl: operator has an empty shape");
  if (!op.apply || !op.apply_transpose) throw std::invalid_argument("gkl: operator needs perform_op and perform_op_transpose");
}

Vec gaussian_unit(Index n, std::mt19937_64& rng) {
  std::normal_distribution<double> N(0.0, 1.0);
  Vec g(n);
  for (Index i = 0; i < n; ++i) g(i) = N(rng);
  return g / g.stableNorm();
}

struct SmallSvd {
  Vec s;  // descending
  Mat U, V;
};

SmallSvd small_svd(Mat B) {
  const lapack_int k = static_cast<lapack_int>(B.rows());
  SmallSvd r;
  r.s.resize(k);
  r.U.resize(k, k);
  r.V.resize(k, k);
  Mat Vt(k, k);
  check_lapack("gkl projected matrix: LAPACKE_dgesdd",
               LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'A', k, k, B.data(), k, r.s.data(), r.U.data(), k, Vt.data(), k));
  r.V = Vt.transpose();
  return r;
}

// Ritz values in the order wanted (largest first or smallest first) with their residuals
// η_i = β |(U_B)_{k,i}| / √2 + δ (the augmented-matrix residual of header comment, plus the
// rounding allowance δ).
struct Ritz {
  std::vector<double> theta, eta;
  std::vector<Index> index;  // column of U_B / V_B
  // Weyl term of the Ritz values not selected (bidiagonal estimate): θ_{s+1} − (β/√2 + δ) for
  // the smallest end, θ_{s+1} + (β/√2 + δ) for the largest; NaN when every Ritz value is listed.
  double rest = std::numeric_limits<double>::quiet_NaN();
  double eta_at(size_t i) const { return i < eta.size() ? eta[i] : kInf; }  // i = eta.size(): the rest
};

struct Bracket {
  double lo = 0, hi = kInf;
  std::string bound;
  size_t limiting = 0;  // the kept Ritz value whose Weyl interval sets the assumption-bearing end
                        // (theta.size(): the unselected rest)
};

// The bounds of analysis/spectral/gkl.h (Weyl + Courant–Fischer). For the largest end `norm_kv`
// (‖K ṽ_1‖, or θ_1 while iterating) gives the rigorous lower end; for the smallest end the
// rigorous upper end, ‖K ṽ_1‖ + δ, and not min(θ_1, ‖K ṽ_1‖) + δ: the explicit θ_1 = ũᵀKṽ is at most
// ‖K ṽ‖ (Cauchy–Schwarz), so that min was always θ_1, which is no Courant–Fischer bound (a ũ off
// K ṽ's direction puts it below σ_min). While iterating θ_1 is used: K P_j = Q_j B_j makes
// ‖K ṽ_1‖ = θ_1 there. Guarded by GklBracket.ALeftVectorOffItsDirectionDoesNotLowerSigmaMinsUpperEnd.
// The Weyl end takes the extreme over all kept Ritz values, so a second Ritz value whose interval
// reaches further out widens the bracket.
Bracket bracket_of(const Ritz& r, Which which, double norm_kv, double delta) {
  Bracket b;
  b.bound = "weyl";
  if (which == Which::kLargest) {
    b.lo = std::max(0.0, norm_kv - delta);                    // (CF)
    b.hi = 0.0;                                               // (W) + (A)
    for (size_t i = 0; i < r.theta.size(); ++i)
      if (r.theta[i] + r.eta[i] > b.hi) b.hi = r.theta[i] + r.eta[i], b.limiting = i;
    if (r.rest > b.hi) b.hi = r.rest, b.limiting = r.theta.size();
  } else {
    b.hi = norm_kv + delta;                                   // (CF)
    b.lo = kInf;                                              // (W) + (A)
    for (size_t i = 0; i < r.theta.size(); ++i)
      if (r.theta[i] - r.eta[i] < b.lo) b.lo = r.theta[i] - r.eta[i], b.limiting = i;
    if (r.rest < b.lo) b.lo = r.rest, b.limiting = r.theta.size();
    b.lo = std::max(0.0, b.lo);
  }
  return b;
}

bool tight(const Bracket& b, double rel_tol) { return b.lo > 0 && b.hi / b.lo - 1.0 <= rel_tol; }

// A product counted against the budget. NaN or inf in its result is the operator's failure:
// thrown here, never passed on to the small SVD as garbage.
void count_product(bool finite, bool transpose, Budget& budget) {
  ++budget.used;
  if (!finite)
    throw std::runtime_error(std::string("gkl: the operator returned NaN or inf (") + (transpose ? "K^T q" : "K p") +
                             "): the matrix or its inputs are not finite");
}

// y = K x (transpose = false) or y = Kᵀ x for a host vector, counted.
Vec apply_counted(const KrylovBasis& basis, bool transpose, const Vec& x, Budget& budget) {
  Vec y = basis.apply(transpose, x);
  count_product(y.allFinite(), transpose, budget);
  return y;
}

// Rayleigh quotient and explicit augmented residual of a triplet (two products).
struct Explicit {
  double theta = 0, eta = 0, norm_kv = 0;
};

Explicit explicit_residual(const KrylovBasis& basis, const Vec& u, const Vec& v, Budget& budget) {
  const Vec Kv = apply_counted(basis, false, v, budget);
  const Vec Ktu = apply_counted(basis, true, u, budget);
  // Norms by stableNorm and hypot, never through squares: an operator whose products are below
  // ~1e-154 (or above ~1e154) would underflow (overflow) them (gkl.h, "Range").
  const double nu = u.stableNorm(), nv = v.stableNorm();
  Explicit e;
  e.theta = (u / nu).dot(Kv / nv);
  const double r1 = (Kv / nv - e.theta * u / nu).stableNorm();
  const double r2 = (Ktu / nu - e.theta * v / nv).stableNorm();
  e.eta = std::hypot(r1, r2) / std::sqrt(2.0);
  e.norm_kv = Kv.stableNorm() / nv;
  return e;
}

constexpr Index kCheckEvery = 4;

// Ritz values in wanted order with residuals (β |(U_B)_{k,i}| / √2 + δ), from the columns of
// `svd` (all of B_k's triplets, or a selection at the wanted end; descending either way).
Ritz ritz_of(const SmallSvd& svd, double beta_last, Which which, double delta) {
  Ritz ritz;
  const Index count = svd.s.size(), last_row = svd.U.rows() - 1;
  for (Index i = 0; i < count; ++i) {
    const Index idx = which == Which::kLargest ? i : count - 1 - i;
    ritz.index.push_back(idx);
    ritz.theta.push_back(svd.s(idx));
    ritz.eta.push_back(beta_last * std::abs(svd.U(last_row, idx)) / std::sqrt(2.0) + delta);
  }
  return ritz;
}

// The s singular triplets at the wanted end of the upper bidiagonal matrix with diagonal `d` and
// superdiagonal `e` (LAPACKE dbdsvdx, which numbers singular values from the largest), in
// descending order, and the next singular value beyond them (NaN when s = the order).
struct Selected {
  SmallSvd svd;
  double next = std::numeric_limits<double>::quiet_NaN();
};

Selected bidiagonal_select(Vec d, Vec e, Index s, Which which) {
  const lapack_int j = static_cast<lapack_int>(d.size());
  const lapack_int want = static_cast<lapack_int>(std::min<Index>(s + 1, j));  // s and the next one
  const lapack_int il = which == Which::kLargest ? 1 : j - want + 1, iu = which == Which::kLargest ? want : j;
  lapack_int found = 0;
  Vec values(j);
  Mat Z(2 * static_cast<Index>(j), want);  // column i: u_i (rows 0..j−1) over v_i (rows j..2j−1)
  std::vector<lapack_int> fail(12 * static_cast<size_t>(j));
  check_lapack("gkl bidiagonal estimate: LAPACKE_dbdsvdx",
               LAPACKE_dbdsvdx(LAPACK_COL_MAJOR, 'U', 'V', 'I', j, d.data(), e.data(), 0.0, 0.0, il, iu, &found,
                               values.data(), Z.data(), 2 * j, fail.data()));
  if (found != want) throw std::runtime_error("gkl bidiagonal estimate: dbdsvdx returned too few singular values");
  const Index selected = std::min<Index>(s, j);
  const Index first = (which == Which::kSmallest && want > selected) ? 1 : 0;  // skip "next" at the front
  Selected out;
  out.svd.s = values.segment(first, selected);
  out.svd.U = Z.block(0, first, j, selected);
  out.svd.V = Z.block(j, first, j, selected);
  if (want > selected) out.next = values(which == Which::kLargest ? selected : 0);
  return out;
}

double rounding_allowance(double sqrtN, double scale_hint, double theta_max) {
  return 4.0 * sqrtN * kEps * std::max(scale_hint, theta_max);
}

// p_0: a Gaussian unit vector, or the warm start plus 1e-3 of one (kept off an exactly invariant
// subspace), normalised.
Vec start_vector(const Vec& start, Index n, std::mt19937_64& rng) {
  Vec p0 = gaussian_unit(n, rng);
  if (start.size() == n && start.allFinite() && start.stableNorm() > 0) p0 = start / start.stableNorm() + 1e-3 * p0;
  return p0 / p0.stableNorm();
}

// What the recurrence says after j steps, before any explicit product: the SVD of B_j, the
// rounding allowance δ, the Ritz triplets in wanted order with η_i = β_j |(U_B)_{j,i}| / √2 + δ,
// and the bracket of analysis/spectral/gkl.h with θ_1 standing in for ‖K ṽ_1‖.
struct Estimate {
  SmallSvd svd;
  double delta = 0;
  Ritz ritz;
  Bracket bracket;
  bool tight = false;             // κ-width target met
  bool rounding_limited = false;  // η_1 at the rounding allowance: the bracket cannot shrink further
  bool below_floor = false;       // smallest end: σ_min_hi under the noise floor max(m, n)·eps·σ_max
  bool converged() const { return tight || rounding_limited || below_floor; }
};

// How one sweep of left/right steps ended: B_kk holds the recurrence, β_last = β_kk.
struct Sweep {
  Index kk = 0;
  double beta_last = 0;
  bool exhausted = false;      // the Krylov space is the whole space (kk = cols)
  bool out_of_budget = false;  // products or seconds ran out (two products kept for the check)
};

// The end an estimate is for: which, its relative bracket width, and σ_max when known (rounding
// allowance and noise floor; 0 for the largest end).
struct Target {
  Which which;
  double rel_tol, scale_hint;
};

// One run of the thick-restart GKL of analysis/spectral/gkl.h on a tall operator A (rows ≥
// cols): start vector, then sweeps of left/right steps with full reorthogonalisation, each
// followed by the estimate, the stopping test, the explicit check of the wanted triplet, and a
// thick restart when the run goes on. `scale_hint` is σ_max when known (smallest end), else 0.
class GklRun {
 public:
  GklRun(const KrylovSpace& space, Which which, const GklOptions& opt, double rel_tol, double scale_hint,
         const Vec& start, Budget& budget);
  SingularEnd run();
  // After run() for the largest end: the same run goes on for σ_min from the basis it ended with
  // ("Both ends from one run", analysis/spectral/gkl.h). Products and seconds are counted from here.
  SingularEnd continue_for_smallest(double rel_tol, double sigma_max_hi);

 private:
  Sweep sweep();
  bool conclude(const Sweep& sw, bool extend, SingularEnd& out);
  void left_step(Index j);
  double right_step(Index j);
  void product(KrylovSide from, Index j);
  void random_orthogonal(KrylovSide side, Index j);
  bool mid_basis_check_due(Index j) const;
  bool bidiagonal_estimate_due(Index j) const { return restarts_ == 0 && j >= bidiagonal_from_; }
  Estimate estimate(Index j, double beta_last, const Target& t) const;
  void bidiagonal_estimate(Index j, double beta_last, const Target& t, Estimate& e) const;
  Estimate estimate_reported(Index j, double beta_last, const Target& t) const;
  bool stop_on_estimate(const Estimate& e, const Sweep& sw) const;
  bool finish(const Estimate& e, const Sweep& sw, const Target& t, SingularEnd& out);
  void thick_restart(const Estimate& e, Index kk);

  Target target_;           // the end this run iterates for (σ_max, then σ_min on continuation)
  Budget& budget_;
  Clock::time_point t0_;
  const Index m_, n_, k_, keep_, min_steps_, bidiagonal_from_;
  const std::function<void(const GklProgress&)> progress_;
  const double sqrtN_;
  std::mt19937_64 rng_;
  std::unique_ptr<KrylovBasis> basis_;  // P (cols × (k+1)) and Q (rows × k): K P_j = Q_j B_j
  Mat B_;
  Index nkept_ = 0;         // columns kept by the last thick restart
  Index next_step_ = 0;     // the step the next sweep starts at (nkept_, or the continued basis)
  Index steps_ = 0;         // GKL steps taken
  Index restarts_ = 0;
  double scale_;            // running estimate of ‖K‖ for the breakdown tests
  double offband_ = 0;      // before the first restart: the Frobenius norm of B's entries above the superdiagonal
  Index products_at_start_;
  Sweep last_;              // the sweep the run ended with (its basis is still in basis_, B_)
};

GklRun::GklRun(const KrylovSpace& space, Which which, const GklOptions& opt, double rel_tol, double scale_hint,
               const Vec& start, Budget& budget)
    : target_{which, rel_tol, scale_hint}, budget_(budget), t0_(Clock::now()),
      m_(space.rows), n_(space.cols), k_(std::max<Index>(1, std::min(opt.max_basis, n_))),
      keep_(std::max<Index>(1, std::min(opt.keep, k_ - 1))), min_steps_(std::min(opt.min_steps, n_)),
      bidiagonal_from_(std::max<Index>(2, opt.bidiagonal_from)), progress_(opt.progress),
      sqrtN_(std::sqrt(static_cast<double>(std::max(m_, n_)))), rng_(opt.seed + (which == Which::kSmallest ? 1 : 0)),
      basis_(space.make_basis(k_)), B_(Mat::Zero(k_, k_)), scale_(scale_hint), products_at_start_(budget.used) {
  basis_->set_column(KrylovSide::kRight, 0, start_vector(start, n_, rng_));
}

SingularEnd GklRun::run() {
  for (SingularEnd out;;)
    if (conclude(sweep(), false, out)) return out;
}

// After a sweep (or, on continuation, the basis the σ_max run ended with): the estimate, the
// stopping test and the explicit check; true with `out` filled when the run ends here. Otherwise
// the next sweep starts from a thick restart, or (`extend`, with room in the basis) from step kk.
// The budget test ends a run whose budget is spent without another sweep: a continued basis, or
// seconds that ran out during the estimate itself (a sweep sets out_of_budget for the rest).
bool GklRun::conclude(const Sweep& sw, bool extend, SingularEnd& out) {
  last_ = sw;
  const Estimate e = estimate_reported(sw.kk, sw.beta_last, target_);
  if ((stop_on_estimate(e, sw) || sw.out_of_budget || budget_.exhausted(4)) && finish(e, sw, target_, out)) return true;
  if (extend && sw.kk < k_ && !sw.exhausted) next_step_ = sw.kk;
  else thick_restart(e, sw.kk);
  return false;
}

// Steps j = nkept, nkept + 1, … until the basis is full (k), the Krylov space is exhausted, the
// budget runs out, or a mid-basis estimate has converged.
Sweep GklRun::sweep() {
  Sweep sw;
  Index j = next_step_;
  for (; j < k_; ++j) {
    left_step(j);
    sw.beta_last = right_step(j);
    if (j + 1 == n_) {  // the Krylov space is the whole space: β is rounding only
      sw.exhausted = true;
      ++j;
      break;
    }
    if (budget_.exhausted(2 + 2)) {  // keep two products for the explicit residual
      sw.out_of_budget = true;
      ++j;
      break;
    }
    if (mid_basis_check_due(j + 1) && estimate_reported(j + 1, sw.beta_last, target_).converged()) {
      ++j;
      break;
    }
  }
  sw.kk = j;
  return sw;
}

// The work vector of the other side ← K p_j (from = kRight) or Kᵀ q_j, counted and checked.
void GklRun::product(KrylovSide from, Index j) {
  count_product(basis_->product(from, j), from == KrylovSide::kLeft, budget_);
}

// Column j of `side` ← a unit vector orthogonal to its first j columns (after a breakdown).
void GklRun::random_orthogonal(KrylovSide side, Index j) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    basis_->set_work(side, gaussian_unit(side == KrylovSide::kRight ? n_ : m_, rng_));
    basis_->orthogonalise(side, j);
    const double nw = basis_->work_norm(side);
    if (nw > 1e-3) return basis_->store(side, j, nw);
  }
  throw std::runtime_error("gkl: cannot extend an orthonormal basis (breakdown)");
}

// Left step: α_j q_j = K p_j − Σ_{i<j} B(i, j) q_i; sets column j of Q and of B.
void GklRun::left_step(Index j) {
  product(KrylovSide::kRight, j);
  const Vec c = basis_->orthogonalise(KrylovSide::kLeft, j);
  B_.col(j).head(j) = c;
  if (restarts_ == 0 && j >= 2) offband_ = std::hypot(offband_, c.head(j - 1).stableNorm());  // zero in exact arithmetic
  const double alpha = basis_->work_norm(KrylovSide::kLeft);
  scale_ = std::max({scale_, alpha, j > 0 ? c.cwiseAbs().maxCoeff() : 0.0});
  if (alpha <= kEps * scale_ || alpha == 0.0) {
    random_orthogonal(KrylovSide::kLeft, j);  // K p_j ∈ span Q_{j−1}: B(j, j) = 0 (to rounding)
    B_(j, j) = 0.0;
  } else {
    basis_->store(KrylovSide::kLeft, j, alpha);
    B_(j, j) = alpha;
  }
  ++steps_;
}

// Right step: β_j p_{j+1} = Kᵀ q_j − Σ_{i≤j} (…) p_i; sets column j + 1 of P (unless j + 1 = n,
// where β_j is rounding only and returned as it is). Returns β_j, 0 after a breakdown.
double GklRun::right_step(Index j) {
  product(KrylovSide::kLeft, j);
  basis_->orthogonalise(KrylovSide::kRight, j + 1);
  const double beta = basis_->work_norm(KrylovSide::kRight);
  scale_ = std::max(scale_, beta);
  if (j + 1 == n_) return beta;
  if (beta <= kEps * scale_ || beta == 0.0) {
    random_orthogonal(KrylovSide::kRight, j + 1);
    return 0.0;
  }
  basis_->store(KrylovSide::kRight, j + 1, beta);
  return beta;
}

// Mid-basis convergence check every max(4, j/8) steps (the relations above hold for every j, so
// the bounds of B_j are as valid as those of a full basis; an O(j³) SVD each), every j/32 steps
// once the estimate is the O(j·s) bidiagonal one.
bool GklRun::mid_basis_check_due(Index j) const {
  const Index every = std::max<Index>(kCheckEvery, j / (bidiagonal_estimate_due(j) ? 32 : 8));
  return j < k_ && (j - nkept_) % every == 0 && j >= 2 && steps_ >= min_steps_;
}

Estimate GklRun::estimate(Index j, double beta_last, const Target& t) const {
  Estimate e;
  if (bidiagonal_estimate_due(j)) {
    bidiagonal_estimate(j, beta_last, t, e);
  } else {
    e.svd = small_svd(B_.topLeftCorner(j, j));
    e.delta = rounding_allowance(sqrtN_, t.scale_hint, e.svd.s(0));
    e.ritz = ritz_of(e.svd, beta_last, t.which, e.delta);
    e.bracket = bracket_of(e.ritz, t.which, e.ritz.theta[0], e.delta);
  }
  const double floor = static_cast<double>(std::max(m_, n_)) * kEps * std::max(t.scale_hint, e.svd.s(0));
  e.tight = tight(e.bracket, t.rel_tol);
  // Rounding-limited only when the Ritz value that sets the bracket's assumption-bearing end is
  // at the allowance (a kept Ritz value with a large residual can hold the end open: then the
  // bracket can still shrink, and a lower end of 0 is no bracket at all).
  e.rounding_limited = e.ritz.eta_at(e.bracket.limiting) <= 2.0 * e.delta && e.bracket.lo > 0;
  e.below_floor = t.which == Which::kSmallest && e.bracket.hi < floor;
  return e;
}

// The estimate of "Long sweeps" (analysis/spectral/gkl.h): the bidiagonal part of B_j, s selected
// triplets at the wanted end, δ + F as the allowance, and the unselected Ritz values as one Weyl
// term; s doubles while that term sets the bracket's assumption-bearing end.
void GklRun::bidiagonal_estimate(Index j, double beta_last, const Target& t, Estimate& e) const {
  const Vec d = B_.diagonal().head(j);
  const Vec superdiagonal = B_.topLeftCorner(j, j).diagonal(1);
  const double dropped = offband_;  // F
  for (Index s = std::max<Index>(2, keep_ + 1);; s *= 2) {
    const Selected sel = bidiagonal_select(d, superdiagonal, s, t.which);
    e.svd = sel.svd;
    const double top = t.which == Which::kLargest ? sel.svd.s(0) : scale_;
    e.delta = rounding_allowance(sqrtN_, t.scale_hint, top) + dropped;
    e.ritz = ritz_of(e.svd, beta_last, t.which, e.delta);
    const double rest_eta = beta_last / std::sqrt(2.0) + e.delta;  // |(U_B)_{j,i}| ≤ 1
    if (!std::isnan(sel.next)) e.ritz.rest = t.which == Which::kLargest ? sel.next + rest_eta : sel.next - rest_eta;
    e.bracket = bracket_of(e.ritz, t.which, e.ritz.theta[0], e.delta);
    if (e.bracket.limiting < e.ritz.theta.size() || s >= j) return;
  }
}

// estimate(), passed on to GklOptions::progress when one is set.
Estimate GklRun::estimate_reported(Index j, double beta_last, const Target& t) const {
  Estimate e = estimate(j, beta_last, t);
  if (progress_) progress_({t.which == Which::kSmallest, budget_.used, steps_, e.bracket.lo, e.bracket.hi});
  return e;
}

// The stopping test on the recurrence bounds: tight or rounding-limited after min_steps (guards
// assumption (A)), the Krylov space exhausted, or σ_min below the noise floor.
bool GklRun::stop_on_estimate(const Estimate& e, const Sweep& sw) const {
  return ((e.tight || e.rounding_limited) && steps_ >= min_steps_) || sw.exhausted || e.below_floor;
}

// Checks the wanted Ritz triplet with two explicit products and, when the run ends here, fills
// `out` and returns true. False: the recurrence residual was optimistic (lost orthogonality).
bool GklRun::finish(const Estimate& e, const Sweep& sw, const Target& t, SingularEnd& out) {
  const Index idx = e.ritz.index[0];
  const Vec v = basis_->combination(KrylovSide::kRight, sw.kk, e.svd.V.col(idx));
  const Vec u = basis_->combination(KrylovSide::kLeft, sw.kk, e.svd.U.col(idx));
  const Explicit ex = explicit_residual(*basis_, u, v, budget_);
  Ritz checked = e.ritz;
  checked.theta[0] = ex.theta;
  checked.eta[0] = std::max(e.ritz.eta[0], ex.eta + e.delta);
  const Bracket b = bracket_of(checked, t.which, ex.norm_kv, e.delta);
  const bool ok = tight(b, t.rel_tol) || sw.exhausted ||
                  (e.rounding_limited && ex.eta <= 2.0 * e.delta && checked.eta_at(b.limiting) <= 2.0 * e.delta && b.lo > 0);
  if (!(ok || e.below_floor || sw.out_of_budget || budget_.exhausted(4))) return false;
  out.theta = ex.theta;
  out.lo = b.lo;
  out.hi = b.hi;
  out.residual = ex.eta;
  out.u = u / u.stableNorm();
  out.v = v / v.stableNorm();
  out.converged = ok;
  out.below_floor = !ok && e.below_floor;
  out.out_of_budget = !ok && !e.below_floor;  // finish's only other exits: the sweep's or the run's budget
  out.bound = sw.exhausted ? "exhausted" : (!tight(b, t.rel_tol) && ok ? "weyl-rounding" : b.bound);
  out.restarts = restarts_;
  out.products = budget_.used - products_at_start_;
  out.seconds = seconds_since(t0_);
  return true;
}

// The σ_max run's Krylov space, extended: estimate σ_min on the basis as it is (a well-conditioned
// matrix often needs no further step), then sweep on from step kk when the basis has room, or
// thick-restart on the smallest Ritz triplets when it is full.
SingularEnd GklRun::continue_for_smallest(double rel_tol, double sigma_max_hi) {
  target_ = {Which::kSmallest, rel_tol, sigma_max_hi};
  scale_ = std::max(scale_, sigma_max_hi);
  t0_ = Clock::now();
  products_at_start_ = budget_.used;
  SingularEnd out;
  return conclude(last_, true, out) ? out : run();
}

// Thick restart: keep the ℓ wanted Ritz triplets, P_ℓ = P V_B[:, sel], Q_ℓ = Q U_B[:, sel],
// B = diag(θ_sel), and the residual direction p_{k+1} as the next right vector.
void GklRun::thick_restart(const Estimate& e, Index kk) {
  const Index l = std::min<Index>({keep_, kk - 1, static_cast<Index>(e.ritz.theta.size())});
  Mat Vsel(kk, l), Usel(kk, l);
  for (Index i = 0; i < l; ++i) {
    Vsel.col(i) = e.svd.V.col(e.ritz.index[i]);
    Usel.col(i) = e.svd.U.col(e.ritz.index[i]);
  }
  basis_->restart(kk, Vsel, Usel);
  B_.setZero();
  for (Index i = 0; i < l; ++i) B_(i, i) = e.ritz.theta[i];
  nkept_ = next_step_ = l;
  ++restarts_;
}

SingularEnd run_gkl(const KrylovSpace& A, Which which, const GklOptions& opt, double rel_tol, double scale_hint,
                    const Vec& start, Budget& budget) {
  return GklRun(A, which, opt, rel_tol, scale_hint, start, budget).run();
}

// The first start of σ_min: the warm start when there is one (a run of its own), else the σ_max
// run continued ("Both ends from one run" in gkl.h). `continued` says which.
SingularEnd smallest_first(const KrylovSpace& A, const GklOptions& opt, double rel_tol, double sigma_max_hi,
                           const Vec& start, Budget& budget, GklRun& largest_run, bool& continued) {
  continued = start.size() == 0;
  return continued ? largest_run.continue_for_smallest(rel_tol, sigma_max_hi)
                   : run_gkl(A, Which::kSmallest, opt, rel_tol, sigma_max_hi, start, budget);
}

// The smallest end from two independent starts (the confirmation of gkl.h): the first of
// smallest_first, the second an independent Gaussian start. Each targets sqrt(1 + rel_tol) − 1,
// so that two brackets that both contain σ_min merge into one of relative width ≤ rel_tol.
// Merging under (A2), "at most one run missed a singular value":
//   disjoint brackets: the run with the lower θ found a smaller singular value, so the other
//                      missed it; its bracket is discarded;
//   overlapping:       [min lo, min hi] (valid if either run is; the upper end is CF in both).
SingularEnd smallest_confirmed(const KrylovSpace& A, const GklOptions& opt, double rel_tol, double sigma_max_hi,
                               const Vec& start, Budget& budget, GklRun& largest_run, std::string& verdict) {
  const double each_tol = std::sqrt(1.0 + rel_tol) - 1.0;
  bool continued = false;
  const SingularEnd first = smallest_first(A, opt, each_tol, sigma_max_hi, start, budget, largest_run, continued);
  if (!first.converged || first.bound == "exhausted") return first;  // nothing to confirm (verdict stays empty)
  GklOptions second_opt = opt;
  second_opt.seed = opt.seed ^ 0x9e3779b97f4a7c15ULL;  // independent of the first start
  const SingularEnd second = run_gkl(A, Which::kSmallest, second_opt, each_tol, sigma_max_hi, Vec(), budget);
  const bool disjoint = second.hi < first.lo || first.hi < second.lo;
  SingularEnd out = second.theta < first.theta ? second : first;  // vectors of the lower Ritz value
  if (!disjoint) {
    out.lo = std::min(first.lo, second.lo);
    out.hi = std::min(first.hi, second.hi);
  }
  out.products = first.products + second.products;
  out.restarts = first.restarts + second.restarts;
  out.out_of_budget = first.out_of_budget || second.out_of_budget;
  out.below_floor = first.below_floor || second.below_floor;
  out.seconds = first.seconds + second.seconds;
  out.converged = first.converged && second.converged && out.lo > 0 &&
                  (out.hi / out.lo - 1.0 <= rel_tol || out.bound == "weyl-rounding");
  verdict = !second.converged ? "second start unfinished" : disjoint ? "starts disagreed: one run had missed a singular value"
                                                                      : "two starts agree";
  if (continued) verdict += " (first start: the sigma_max run, continued)";
  return out;
}

std::string sci(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

}  // namespace

SingularEnd gkl_largest(const OperatorRef& op, const GklOptions& opt, double rel_tol, const Vec& start) {
  check_operator(op);
  Budget budget{Clock::now(), opt.max_seconds, opt.max_products};
  const OperatorRef A = tall_side(op);
  return run_gkl(host_krylov_space(A), Which::kLargest, opt, rel_tol, 0.0, start, budget);
}

SingularEnd gkl_smallest(const OperatorRef& op, const GklOptions& opt, double rel_tol, double sigma_max_hi,
                         const Vec& start) {
  check_operator(op);
  Budget budget{Clock::now(), opt.max_seconds, opt.max_products};
  const OperatorRef A = tall_side(op);
  return run_gkl(host_krylov_space(A), Which::kSmallest, opt, rel_tol, sigma_max_hi, start, budget);
}

namespace {

// Why a run ended without a bracket, as each end recorded it (SingularEnd): the budget; or σ_min's
// recurrence bound fell under the run's noise floor (from σ_max's upper end, GklRun::estimate)
// while the reported σ_min,hi (from the explicit check) is not under the report's floor (from
// σ_max's proven lower end), so σ_min is neither bracketed nor provably singular; or the two
// starts of the confirmation gave no one tight bracket. Blaming the budget for the last two would
// send the user to raise the wrong knob.
std::string unfinished_reason(const LanczosCondition& out, double floor) {
  if (out.largest.out_of_budget || out.smallest.out_of_budget) return "budget ran out: best bracket reached";
  if (out.smallest.below_floor)
    return "sigma_min stopped at the noise floor (" + sci(floor) + ") with its upper end " + sci(out.smallest.hi) +
           " not provably under it: neither bracketed nor singular";
  return "sigma_min's two starts gave no one bracket within the tolerance";
}

// condition_lanczos on a tall space A (rows ≥ cols) of an operator of shape rows_in × cols_in.
LanczosCondition lanczos_on(const KrylovSpace& A, Index rows_in, Index cols_in, const std::string& matrix,
                            const GklOptions& opt, const GklWarmStart& warm) {
  if (!(opt.tolerance > 0) || opt.max_basis < 2 || opt.keep < 1 || opt.max_products < 8 || !(opt.max_seconds > 0))
    throw std::invalid_argument("condition_lanczos: need tolerance > 0, max_basis >= 2, keep >= 1, max_products >= 8, max_seconds > 0");
  const auto t0 = Clock::now();
  Budget budget{t0, opt.max_seconds, opt.max_products};

  LanczosCondition out;
  // σ_max to a twentieth of the κ tolerance (the top end usually converges fast).
  GklRun largest_run(A, Which::kLargest, opt, opt.tolerance / 20, 0.0, warm.v_max, budget);
  out.largest = largest_run.run();
  const double max_ratio = out.largest.lo > 0 ? out.largest.hi / out.largest.lo : kInf;
  const double min_tol = std::max((1.0 + opt.tolerance) / max_ratio - 1.0, opt.tolerance / 20);
  std::string confirmation;
  bool continued = false;
  out.smallest = opt.confirm_smallest
                     ? smallest_confirmed(A, opt, min_tol, out.largest.hi, warm.v_min, budget, largest_run, confirmation)
                     : smallest_first(A, opt, min_tol, out.largest.hi, warm.v_min, budget, largest_run, continued);
  out.warm.v_max = out.largest.v;
  out.warm.v_min = out.smallest.v;

  ConditionReport& r = out.report;
  r.matrix = matrix;
  r.rows = rows_in;
  r.cols = cols_in;
  r.method = "gkl";
  // The Ritz values, inside their brackets (θ_max = ũᵀKṽ can sit a rounding below ‖Kṽ‖ − δ; after
  // two starts are merged θ_min is one start's), so κ = σ_max/σ_min lies in [κ_lo, κ_hi].
  r.sigma_max = std::clamp(out.largest.theta, out.largest.lo, std::max(out.largest.lo, out.largest.hi));
  r.sigma_min = std::clamp(out.smallest.theta, out.smallest.lo, std::max(out.smallest.lo, out.smallest.hi));
  r.products = budget.used;
  const double floor = noise_floor(r.rows, r.cols, out.largest.lo);
  r.kappa_lo = out.smallest.hi > 0 ? out.largest.lo / out.smallest.hi : kInf;
  r.kappa_hi = out.smallest.lo > 0 ? out.largest.hi / out.smallest.lo : kInf;
  // Singular: σ_min provably under the noise floor, or a finished σ_min bracket whose lower end is
  // 0 (rounding-limited or exhausted: σ_min cannot be told from 0 in fp64). Either way only
  // κ ≥ κ_lo is known, as the dense route's `singular`.
  const bool zero_within_rounding = out.smallest.converged && !(out.smallest.lo > 0);
  if (out.smallest.hi < floor || zero_within_rounding) {
    r.status = Status::kSingular;
    r.kappa = r.kappa_hi = kInf;
    r.rank = -1;
  } else {
    r.kappa = r.sigma_min > 0 ? std::clamp(r.sigma_max / r.sigma_min, r.kappa_lo, std::max(r.kappa_lo, r.kappa_hi)) : kInf;
    // Converged = tight, or rounding-limited (bound "weyl-rounding", the best fp64 allows).
    const bool ok = out.largest.converged && out.smallest.converged;
    r.status = ok ? Status::kBracket : Status::kNotConverged;
    r.rank = out.smallest.lo > floor ? std::min(r.rows, r.cols) : -1;
  }
  std::ostringstream note;
  note << "sigma_max in [" << sci(out.largest.lo) << ", " << sci(out.largest.hi) << "] (" << out.largest.bound << ", "
       << out.largest.restarts << " restarts, " << out.largest.products << " products, " << sci(out.largest.seconds)
       << " s); sigma_min in [" << sci(out.smallest.lo) << ", " << sci(out.smallest.hi) << "] (" << out.smallest.bound
       << ", " << out.smallest.restarts << " restarts, " << out.smallest.products << " products); ";
  if (out.largest.bound == "exhausted" && out.smallest.bound == "exhausted")
    note << "Krylov space exhausted: bounds hold without assumption";
  else
    note << "bounds assume no missed singular value";
  if (!confirmation.empty()) note << "; sigma_min: " << confirmation;
  if (r.status == Status::kNotConverged) note << "; " << unfinished_reason(out, floor);
  if (out.smallest.bound == "weyl-rounding" || out.largest.bound == "weyl-rounding")
    note << "; residuals at the rounding allowance: bracket as tight as fp64 allows";
  r.note = note.str();
  r.seconds = seconds_since(t0);
  return out;
}

}  // namespace

LanczosCondition condition_lanczos(const OperatorRef& op_in, const std::string& matrix, const GklOptions& opt,
                                   const GklWarmStart& warm) {
  check_operator(op_in);
  const OperatorRef tall = tall_side(op_in);
  return lanczos_on(host_krylov_space(tall), op_in.rows, op_in.cols, matrix, opt, warm);
}

LanczosCondition condition_lanczos(const KrylovSpace& space, const std::string& matrix, const GklOptions& opt,
                                   const GklWarmStart& warm) {
  if (space.cols <= 0 || space.rows < space.cols || !space.make_basis)
    throw std::invalid_argument("condition_lanczos: a KrylovSpace needs rows >= cols > 0 and a basis maker");
  return lanczos_on(space, space.rows, space.cols, matrix, opt, warm);
}

}  // namespace jacond
