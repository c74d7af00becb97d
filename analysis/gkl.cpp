// Thick-restart Golub–Kahan–Lanczos with certified brackets; the math is in analysis/gkl.h.
#include "analysis/gkl.h"

#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace jacond {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kInf = std::numeric_limits<double>::infinity();

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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
  return g / g.norm();
}

// Classical Gram–Schmidt, twice (CGS2: orthogonal to working precision), of w against the
// first j columns of V. Returns the accumulated coefficients Vᵀw.
Vec orthogonalise(const Mat& V, Index j, Vec& w) {
  Vec c = Vec::Zero(j);
  if (j == 0) return c;
  for (int pass = 0; pass < 2; ++pass) {
    const Vec h = V.leftCols(j).transpose() * w;
    w.noalias() -= V.leftCols(j) * h;
    c += h;
  }
  return c;
}

// A unit vector orthogonal to the first j < rows columns of V (after a breakdown).
Vec random_orthogonal(const Mat& V, Index j, std::mt19937_64& rng) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    Vec w = gaussian_unit(V.rows(), rng);
    orthogonalise(V, j, w);
    const double nw = w.norm();
    if (nw > 1e-3) return w / nw;
  }
  throw std::runtime_error("gkl: cannot extend an orthonormal basis (breakdown)");
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
  const lapack_int info =
      LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'A', k, k, B.data(), k, r.s.data(), r.U.data(), k, Vt.data(), k);
  if (info != 0) throw std::runtime_error("gkl: LAPACKE_dgesdd on the projected matrix failed, info=" + std::to_string(info));
  r.V = Vt.transpose();
  return r;
}

// Ritz values in the order wanted (largest first or smallest first) with their residuals
// η_i = β |(U_B)_{k,i}| / √2 + δ (the augmented-matrix residual of header comment, plus the
// rounding allowance δ).
struct Ritz {
  std::vector<double> theta, eta;
  std::vector<Index> index;  // column of U_B / V_B
};

struct Bracket {
  double lo = 0, hi = kInf;
  std::string bound;
};

// The bounds of analysis/gkl.h (Weyl + Courant–Fischer). For the largest end `norm_kv`
// (‖K ṽ_1‖, or θ_1 while iterating) gives the rigorous lower end; for the smallest end the
// rigorous upper end. The Weyl end takes the extreme over all kept Ritz values, so a second
// Ritz value whose interval reaches further out widens the bracket.
Bracket bracket_of(const Ritz& r, Which which, double norm_kv, double delta) {
  Bracket b;
  b.bound = "weyl";
  if (which == Which::kLargest) {
    b.lo = std::max(0.0, norm_kv - delta);                    // (CF)
    b.hi = 0.0;                                               // (W) + (A)
    for (size_t i = 0; i < r.theta.size(); ++i) b.hi = std::max(b.hi, r.theta[i] + r.eta[i]);
  } else {
    b.hi = std::min(r.theta[0] + delta, norm_kv + delta);     // (CF)
    b.lo = kInf;                                              // (W) + (A)
    for (size_t i = 0; i < r.theta.size(); ++i) b.lo = std::min(b.lo, r.theta[i] - r.eta[i]);
    b.lo = std::max(0.0, b.lo);
  }
  return b;
}

bool tight(const Bracket& b, double rel_tol) { return b.lo > 0 && b.hi / b.lo - 1.0 <= rel_tol; }

// Rayleigh quotient and explicit augmented residual of a triplet (two products).
struct Explicit {
  double theta = 0, eta = 0, norm_kv = 0;
};

Explicit explicit_residual(const OperatorRef& A, const Vec& u, const Vec& v, Budget& budget) {
  Vec Kv(A.rows), Ktu(A.cols);
  A.apply(v.data(), Kv.data());
  A.apply_transpose(u.data(), Ktu.data());
  budget.used += 2;
  const double nu = u.norm(), nv = v.norm();
  Explicit e;
  e.theta = u.dot(Kv) / (nu * nv);
  const double r1 = (Kv / nv - e.theta * u / nu).squaredNorm();
  const double r2 = (Ktu / nu - e.theta * v / nv).squaredNorm();
  e.eta = std::sqrt((r1 + r2) / 2.0);
  e.norm_kv = Kv.norm() / nv;
  return e;
}

constexpr Index kCheckEvery = 4;

// Ritz values in wanted order with residuals (β |(U_B)_{k,i}| / √2 + δ).
Ritz ritz_of(const SmallSvd& svd, Index kk, double beta_last, Which which, double delta) {
  Ritz ritz;
  for (Index i = 0; i < kk; ++i) {
    const Index idx = which == Which::kLargest ? i : kk - 1 - i;
    ritz.index.push_back(idx);
    ritz.theta.push_back(svd.s(idx));
    ritz.eta.push_back(beta_last * std::abs(svd.U(kk - 1, idx)) / std::sqrt(2.0) + delta);
  }
  return ritz;
}

double rounding_allowance(double sqrtN, double scale_hint, double theta_max) {
  return 4.0 * sqrtN * kEps * std::max(scale_hint, theta_max);
}

// True when the recurrence bounds already meet the target (or σ_min is below the floor).
bool estimate_converged(const Mat& Bj, double beta_last, Which which, double rel_tol, double scale_hint, double sqrtN,
                        Index m, Index n) {
  const SmallSvd svd = small_svd(Bj);
  const double delta = rounding_allowance(sqrtN, scale_hint, svd.s(0));
  const Ritz ritz = ritz_of(svd, Bj.rows(), beta_last, which, delta);
  const Bracket est = bracket_of(ritz, which, ritz.theta[0], delta);
  const double floor = static_cast<double>(std::max(m, n)) * kEps * std::max(scale_hint, svd.s(0));
  const bool rounding_limited = ritz.eta[0] <= 2.0 * delta;
  return tight(est, rel_tol) || rounding_limited || (which == Which::kSmallest && est.hi < floor);
}

// The thick-restart GKL of analysis/gkl.h on a tall operator A (rows ≥ cols).
// `scale_hint` is σ_max when known (smallest end), else 0 (the running estimate is used).
SingularEnd run_gkl(const OperatorRef& A, Which which, const GklOptions& opt, double rel_tol, double scale_hint,
                    const Vec& start, Budget& budget) {
  const auto t0 = Clock::now();
  const Index m = A.rows, n = A.cols;
  const Index k = std::max<Index>(1, std::min(opt.max_basis, n));
  const Index keep = std::max<Index>(1, std::min(opt.keep, k - 1));
  const double sqrtN = std::sqrt(static_cast<double>(std::max(m, n)));
  std::mt19937_64 rng(opt.seed + (which == Which::kSmallest ? 1 : 0));

  Mat P(n, k + 1), Q(m, k), B = Mat::Zero(k, k);
  {
    Vec p0 = gaussian_unit(n, rng);
    if (start.size() == n && start.allFinite() && start.norm() > 0)
      p0 = start / start.norm() + 1e-3 * p0;  // warm start, kept off an exactly invariant subspace
    P.col(0) = p0 / p0.norm();
  }

  SingularEnd out;
  Index nkept = 0, steps = 0;
  const Index min_steps = std::min(opt.min_steps, n);
  double scale = scale_hint;  // running estimate of ‖K‖ for breakdown tests and δ
  const Index products_at_start = budget.used;

  for (;;) {
    bool out_of_budget = false, exhausted = false;
    double beta_last = 0;
    Index j = nkept;
    for (; j < k; ++j) {
      // Left step: α_j q_j = K p_j − Σ_i B(i, j) q_i.
      Vec w(m);
      A.apply(P.col(j).data(), w.data());
      ++budget.used;
      const Vec c = orthogonalise(Q, j, w);
      B.col(j).head(j) = c;
      const double alpha = w.norm();
      scale = std::max({scale, alpha, j > 0 ? c.cwiseAbs().maxCoeff() : 0.0});
      if (alpha <= kEps * scale || alpha == 0.0) {
        Q.col(j) = random_orthogonal(Q, j, rng);  // K p_j ∈ span Q_{j−1}: B(j, j) = 0 (to rounding)
        B(j, j) = 0.0;
      } else {
        Q.col(j) = w / alpha;
        B(j, j) = alpha;
      }
      ++steps;
      // Right step: β_j p_{j+1} = Kᵀ q_j − Σ_i (…) p_i.
      Vec z(n);
      A.apply_transpose(Q.col(j).data(), z.data());
      ++budget.used;
      orthogonalise(P, j + 1, z);
      const double beta = z.norm();
      scale = std::max(scale, beta);
      if (j + 1 == n) {  // the Krylov space is the whole space: β is rounding only
        beta_last = beta;
        exhausted = true;
        ++j;
        break;
      }
      if (beta <= kEps * scale || beta == 0.0) {
        P.col(j + 1) = random_orthogonal(P, j + 1, rng);
        beta_last = 0.0;
      } else {
        P.col(j + 1) = z / beta;
        beta_last = beta;
      }
      if (budget.exhausted(2 + 2)) {  // keep two products for the explicit residual
        out_of_budget = true;
        ++j;
        break;
      }
      // Mid-basis convergence check every max(4, j/8) steps (the relations above hold for
      // every j, so the bounds of B_j are as valid as those of a full basis; an O(j³) SVD each).
      if (j + 1 < k && (j + 1 - nkept) % std::max<Index>(kCheckEvery, (j + 1) / 8) == 0 && j + 1 >= 2 &&
          steps >= min_steps &&
          estimate_converged(B.topLeftCorner(j + 1, j + 1), beta_last, which, rel_tol, scale_hint, sqrtN, m, n)) {
        ++j;
        break;
      }
    }
    const Index kk = j;
    const SmallSvd svd = small_svd(B.topLeftCorner(kk, kk));
    const double delta = rounding_allowance(sqrtN, scale_hint, svd.s(0));
    const Ritz ritz = ritz_of(svd, kk, beta_last, which, delta);
    const Bracket est = bracket_of(ritz, which, ritz.theta[0], delta);
    const double floor = static_cast<double>(std::max(m, n)) * kEps * std::max(scale_hint, svd.s(0));
    const bool below_floor = which == Which::kSmallest && est.hi < floor;
    // Rounding-limited: the recurrence residual is down to the rounding allowance δ, so the
    // bracket cannot shrink further (κ near 1/(sqrt(N)·eps)); accepted as converged.
    const bool rounding_limited = ritz.eta[0] <= 2.0 * delta;
    const bool done_estimate = ((tight(est, rel_tol) || rounding_limited) && steps >= min_steps) || exhausted || below_floor;

    if (done_estimate || out_of_budget) {
      const Index idx = ritz.index[0];
      Vec v = P.leftCols(kk) * svd.V.col(idx);
      Vec u = Q.leftCols(kk) * svd.U.col(idx);
      const Explicit ex = explicit_residual(A, u, v, budget);
      Ritz checked = ritz;
      checked.theta[0] = ex.theta;
      checked.eta[0] = std::max(ritz.eta[0], ex.eta + delta);
      const Bracket b = bracket_of(checked, which, ex.norm_kv, delta);
      const bool ok = tight(b, rel_tol) || exhausted || (rounding_limited && ex.eta <= 2.0 * delta);
      if (ok || below_floor || out_of_budget || budget.exhausted(4)) {
        out.theta = ex.theta;
        out.lo = b.lo;
        out.hi = b.hi;
        out.residual = ex.eta;
        out.u = u / u.norm();
        out.v = v / v.norm();
        out.converged = ok;
        out.bound = exhausted ? "exhausted" : (!tight(b, rel_tol) && ok ? "weyl-rounding" : b.bound);
        out.products = budget.used - products_at_start;
        out.seconds = seconds_since(t0);
        return out;
      }
      // The recurrence residual was optimistic (lost orthogonality): keep iterating.
    }

    // Thick restart: keep the ℓ wanted Ritz triplets and the residual direction p_{k+1}.
    const Index l = std::min(keep, kk - 1);
    Mat Vsel(kk, l), Usel(kk, l);
    for (Index i = 0; i < l; ++i) {
      Vsel.col(i) = svd.V.col(ritz.index[i]);
      Usel.col(i) = svd.U.col(ritz.index[i]);
    }
    const Mat Pnew = P.leftCols(kk) * Vsel;
    const Mat Qnew = Q.leftCols(kk) * Usel;
    const Vec pnext = P.col(kk);
    P.leftCols(l) = Pnew;
    P.col(l) = pnext;
    Q.leftCols(l) = Qnew;
    B.setZero();
    for (Index i = 0; i < l; ++i) B(i, i) = ritz.theta[i];
    nkept = l;
    ++out.restarts;
  }
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
  return run_gkl(tall_side(op), Which::kLargest, opt, rel_tol, 0.0, start, budget);
}

SingularEnd gkl_smallest(const OperatorRef& op, const GklOptions& opt, double rel_tol, double sigma_max_hi,
                         const Vec& start) {
  check_operator(op);
  Budget budget{Clock::now(), opt.max_seconds, opt.max_products};
  return run_gkl(tall_side(op), Which::kSmallest, opt, rel_tol, sigma_max_hi, start, budget);
}

LanczosCondition condition_lanczos(const OperatorRef& op_in, const std::string& matrix, const GklOptions& opt,
                                   const GklWarmStart& warm) {
  check_operator(op_in);
  if (!(opt.tolerance > 0) || opt.max_basis < 2 || opt.keep < 1 || opt.max_products < 8 || !(opt.max_seconds > 0))
    throw std::invalid_argument("condition_lanczos: need tolerance > 0, max_basis >= 2, keep >= 1, max_products >= 8, max_seconds > 0");
  const auto t0 = Clock::now();
  const OperatorRef A = tall_side(op_in);
  Budget budget{t0, opt.max_seconds, opt.max_products};

  LanczosCondition out;
  // σ_max to a twentieth of the κ tolerance (the top end usually converges fast).
  out.largest = run_gkl(A, Which::kLargest, opt, opt.tolerance / 20, 0.0, warm.v_max, budget);
  const double max_ratio = out.largest.lo > 0 ? out.largest.hi / out.largest.lo : kInf;
  const double min_tol = std::max((1.0 + opt.tolerance) / max_ratio - 1.0, opt.tolerance / 20);
  out.smallest = run_gkl(A, Which::kSmallest, opt, min_tol, out.largest.hi, warm.v_min, budget);
  out.warm.v_max = out.largest.v;
  out.warm.v_min = out.smallest.v;

  ConditionReport& r = out.report;
  r.matrix = matrix;
  r.rows = op_in.rows;
  r.cols = op_in.cols;
  r.method = "gkl";
  r.sigma_max = out.largest.theta;
  r.sigma_min = out.smallest.theta;
  r.products = budget.used;
  const double floor = noise_floor(r.rows, r.cols, out.largest.lo);
  r.kappa_lo = out.smallest.hi > 0 ? out.largest.lo / out.smallest.hi : kInf;
  r.kappa_hi = out.smallest.lo > 0 ? out.largest.hi / out.smallest.lo : kInf;
  if (out.smallest.hi < floor) {
    r.status = Status::kSingular;
    r.kappa = r.kappa_hi = kInf;
    r.rank = -1;
  } else {
    r.kappa = r.sigma_min > 0 ? r.sigma_max / r.sigma_min : kInf;
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
  if (r.status == Status::kNotConverged) note << "; budget ran out: best bracket reached";
  if (out.smallest.bound == "weyl-rounding" || out.largest.bound == "weyl-rounding")
    note << "; residuals at the rounding allowance: bracket as tight as fp64 allows";
  r.note = note.str();
  r.seconds = seconds_since(t0);
  return out;
}

}  // namespace jacond
