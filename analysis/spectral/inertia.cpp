#include "analysis/core/clock.h"
#include "analysis/spectral/inertia.h"

#include <Eigen/SVD>
#include <Spectra/SymEigsSolver.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "analysis/core/lapack.h"
#include "analysis/spectral/lu_lanczos.h"

namespace jacond {

namespace {

std::string fmt(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

using Clock = std::chrono::steady_clock;
constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;

// γ = p(M)u / (1 − p(M)u) with p(M) = 2M (header: the one assumption).
double gamma_of(Index M) {
  const double pu = 2.0 * static_cast<double>(M) * kUnitRoundoff;
  return pu / (1.0 - pu);
}

// ρ(|K|) bound for the augmented matrix: ‖|K|‖₂ ≤ sqrt(‖K‖₁ ‖K‖_∞), taken as sqrt(‖K‖₁)·sqrt(‖K‖_∞):
// the product ‖K‖₁‖K‖_∞ overflows to inf for entries ≳ 1e154 (δ = inf: nothing certified) and
// underflows to 0 below ≈ 1e-154 (δ too small: a count read as exact that is not). The two roots
// cost one more rounding each, covered by the (1 + 4Mu) of rounding_radius. Guarded by
// InertiaCount.CountsAreScaleInvariantFromTinyToHuge.
double abs_norm_bound(const Mat& K) {
  const double one = K.cwiseAbs().colwise().sum().maxCoeff();
  const double inf = K.cwiseAbs().rowwise().sum().maxCoeff();
  return std::sqrt(one) * std::sqrt(inf);
}

// H_μ = P L D Lᵀ Pᵀ of the augmented matrix (header), factorised by `device` (its `ldlt`: rook on
// the host, Bunch–Kaufman on a GPU) and read here in dsytrf_rk's layout (analysis/spectral/ldlt.h).
class AugmentedLdlt {
 public:
  AugmentedLdlt(const Mat& K, double mu, const DenseDevice& device)
      : K_(K), mu_(mu), m_(K.rows()), n_(K.cols()), abs_H_bound_(mu + abs_norm_bound(K)) {
    const Index M = m_ + n_;
    Mat lower = Mat::Zero(M, M);
    lower.diagonal().setConstant(-mu);
    lower.block(m_, 0, n_, m_) = K.transpose();  // lower triangle only: the block below −μI_m
    f_ = device.ldlt(std::move(lower));
  }

  Index order() const { return f_->order(); }
  bool zero_pivot() const { return f_->zero_pivot; }
  const std::string& where() const { return f_->where; }

  // Negative eigenvalues of D (= of the computed P L D Lᵀ Pᵀ, by Sylvester).
  // A 2 × 2 block [a b; b c] of either pivoting has |ac| < α²b² ≈ 0.41 b² (ldlt.h: the pivot test
  // LAPACK and cuSOLVER apply to these very entries), so det = ac − b² < 0: one eigenvalue of
  // each sign. The determinant's sign is read from the block scaled by a power of two (exact)
  // that brings its largest entry into [0.5, 1): unscaled, ac − b² underflowed to 0 for entries
  // ≲ 1e-154 (the block then counted 0 negatives: 18 below instead of 23 at scale 1e-165, and a
  // false certified σ_min) and overflowed to inf − inf = NaN for entries ≳ 1e154 (0 again; the
  // count went to −1). Scaled, a'c' and b'² are ≤ 1, and by the pivot bound b'² ≥ |a'c'|/0.41, so
  // neither cancellation nor underflow can flip the sign; the full 2 × 2 rule is kept for a
  // factorisation that would break the bound. Guarded by InertiaCount.CountsAreScaleInvariantFromTinyToHuge
  // and CertifyExtremes.ATinyMatrixsMissedSigmaMinIsNotCertifiedAway.
  Index negative_count() const {
    Index neg = 0;
    const Mat& F = f_->F;
    for (Index i = 0; i < order(); ++i) {
      if (f_->is_2x2(i)) {
        double a = F(i, i), b = f_->e(i), c = F(i + 1, i + 1);
        const double top = std::max({std::abs(a), std::abs(b), std::abs(c)});
        if (top > 0 && std::isfinite(top)) {
          const int e = std::ilogb(top) + 1;  // top · 2^−e ∈ [0.5, 1)
          a = std::ldexp(a, -e), b = std::ldexp(b, -e), c = std::ldexp(c, -e);
        }
        const double det = a * c - b * b;
        neg += det < 0 ? 1 : (det > 0 && a < 0 ? 2 : (det == 0 && (a + c) < 0 ? 1 : 0));
        ++i;
      } else if (F(i, i) < 0) {
        ++neg;
      }
    }
    return neg;
  }

  // δ of (C): γ (ρ(|H_μ|) + ρ(|L||D||Lᵀ|)), both ρ rigorous upper bounds (header).
  double rounding_radius() const {
    const Index M = order();
    // Power steps on Y until the Collatz–Wielandt bound stops falling by 1 % (at most 30): each
    // is two passes over L, O(M²); every bound along the way is rigorous, the last is the tightest.
    Vec x = Vec::Ones(M), y(M);
    double rho_y = std::numeric_limits<double>::infinity();
    for (int step = 0; step < 30; ++step) {
      abs_ldlt_times(x, y);
      double bound = 0;
      for (Index i = 0; i < M; ++i) bound = std::max(bound, y(i) / x(i));  // Collatz–Wielandt
      const bool settled = bound > 0.99 * rho_y;
      rho_y = std::min(rho_y, bound);
      const double top = y.maxCoeff();
      if (settled || !(top > 0)) break;
      x = (y / top).cwiseMax(1e-12);  // stays positive
    }
    return gamma_of(M) * (abs_H_bound_ + rho_y) * (1 + 4 * static_cast<double>(M) * kUnitRoundoff);
  }

  // y = H_μ⁻¹ x through the factors (on the device that holds them).
  void solve(const double* x, double* y) const { f_->solve(x, y); }

  // An upper bound on ‖H_μ v − λ v‖ / ‖v‖ (the residual of an approximate eigenpair), through K (the
  // factorisation overwrote H_μ). Computed in long double (u_L = 2⁻⁶⁴ on x86-64, 2⁻¹¹³ where long
  // double is IEEE quad, u where it is double) so that its rounding, γ^L_{max(m,n)+3} (ρ(|H_μ|) +
  // |λ|) ‖v‖ by the recursive-summation bound, sits 2¹¹ below the fp64 one, which at κ 1e12 was
  // a third of σ_min and made every interval that wide (the computed residuals were 1e-3 of it).
  double residual_bound(const Vec& v, double lambda) const {
    using L = long double;
    // IEEE formats only (double, x87 extended, quad): the bound below is the standard model's.
    static_assert(std::numeric_limits<L>::digits == 53 || std::numeric_limits<L>::digits == 64 ||
                      std::numeric_limits<L>::digits == 113,
                  "residual_bound's rounding model needs an IEEE long double (not IBM double-double)");
    std::vector<L> r(static_cast<size_t>(order()));
    for (Index i = 0; i < order(); ++i) r[i] = -(static_cast<L>(mu_) + static_cast<L>(lambda)) * static_cast<L>(v(i));
    for (Index j = 0; j < n_; ++j) {  // top: K v_bottom, column by column
      const L vj = v(m_ + j);
      for (Index i = 0; i < m_; ++i) r[i] += static_cast<L>(K_(i, j)) * vj;
    }
    for (Index j = 0; j < n_; ++j) {  // bottom: Kᵀ v_top, one column's dot product each
      L dot = 0;
      for (Index i = 0; i < m_; ++i) dot += static_cast<L>(K_(i, j)) * static_cast<L>(v(i));
      r[m_ + j] += dot;
    }
    L rr = 0, vv = 0;
    for (Index i = 0; i < order(); ++i) {
      rr += r[i] * r[i];
      vv += static_cast<L>(v(i)) * static_cast<L>(v(i));
    }
    const L u = std::numeric_limits<L>::epsilon() / 2;
    const auto gamma = [&](Index k) { return static_cast<L>(k) * u / (1 - static_cast<L>(k) * u); };
    const L rounding = gamma(std::max(m_, n_) + 3) * (static_cast<L>(abs_H_bound_) + std::abs(static_cast<L>(lambda)));
    const L sums = 1 + 4 * gamma(order() + 2);  // the two sums of squares and their square roots
    const L bound = (std::sqrt(rr) * sums + rounding * std::sqrt(vv) * sums) / (std::sqrt(vv) / sums);
    return std::nextafter(static_cast<double>(bound), std::numeric_limits<double>::infinity());
  }

 private:
  // First row of L's column j below the diagonal: L(j+1, j) = 0 when a 2 × 2 block starts at j.
  Index first_below(Index j) const { return j + (f_->is_2x2(j) ? 2 : 1); }

  // y = |L| |D| |Lᵀ| x, one pass over L's strict lower triangle per triangular product.
  void abs_ldlt_times(const Vec& x, Vec& y) const {
    const Index M = order();
    const Mat& F = f_->F;
    Vec t(M);
    for (Index j = 0; j < M; ++j) {  // t = |Lᵀ| x
      const Index first = first_below(j);
      t(j) = x(j) + (first < M ? F.col(j).tail(M - first).cwiseAbs().dot(x.tail(M - first)) : 0.0);
    }
    Vec u(M);
    for (Index i = 0; i < M; ++i) {  // u = |D| t
      if (f_->is_2x2(i)) {
        const double a = std::abs(F(i, i)), b = std::abs(f_->e(i)), c = std::abs(F(i + 1, i + 1));
        u(i) = a * t(i) + b * t(i + 1);
        u(i + 1) = b * t(i) + c * t(i + 1);
        ++i;
      } else {
        u(i) = std::abs(F(i, i)) * t(i);
      }
    }
    y = u;  // y = |L| u (unit diagonal)
    for (Index j = 0; j < M; ++j) {
      const Index first = first_below(j);
      if (first < M) y.tail(M - first) += F.col(j).tail(M - first).cwiseAbs() * u(j);
    }
  }

  const Mat& K_;
  double mu_;
  Index m_, n_;
  double abs_H_bound_;  // ρ(|H_μ|) ≤ μ + sqrt(‖K‖₁‖K‖_∞), O(mn) to form: once per factorisation
  std::unique_ptr<LdltFactors> f_;
};

// x ↦ H_μ⁻¹ x for Spectra: its largest-magnitude eigenvalues are 1/λ for the λ of H_μ nearest 0.
class ShiftInvertOp {
 public:
  using Scalar = double;
  explicit ShiftInvertOp(const AugmentedLdlt& f) : f_(f) {}
  Index rows() const { return f_.order(); }
  Index cols() const { return f_.order(); }
  void perform_op(const double* x, double* y) const { f_.solve(x, y); }
 private:
  const AugmentedLdlt& f_;
};

// The k eigenpairs of H_μ nearest 0 as singular-value intervals (header); false if Lanczos failed.
bool nearest_singular_values(const AugmentedLdlt& f, double mu, Index k, std::vector<SingularInterval>& out,
                             double* nearest_distance) {
  ShiftInvertOp op(f);
  const Index M = f.order();
  k = std::min<Index>(k, M - 1);
  Spectra::SymEigsSolver<ShiftInvertOp> eigs(op, k, std::min<Index>(M, std::max<Index>(2 * k + 1, 24)));
  try {
    eigs.init();
    eigs.compute(Spectra::SortRule::LargestMagn, 500, 1e-10);
  } catch (const LapackError&) {
    throw;
  } catch (const DeviceError&) {
    throw;  // the device's own failure (a CUDA call), not an outcome
  } catch (const std::runtime_error&) {
    return false;  // Spectra's tridiagonal eigensolver failed on H_μ⁻¹'s huge entries: μ is within rounding of a σ
  }
  if (eigs.info() != Spectra::CompInfo::Successful) return false;
  const Vec nu = eigs.eigenvalues();
  const Mat V = eigs.eigenvectors();
  *nearest_distance = std::numeric_limits<double>::infinity();
  for (Index i = 0; i < nu.size(); ++i) {
    const double lambda = 1.0 / nu(i);
    // The residual bound, widened by the fp64 rounding of μ + λ ∓ r below (two operations, each
    // within u of its result): with the residual in long double that rounding is no longer small
    // beside r near σ_max (u·σ_max against a residual bound of order 1e3·u_L·σ_max).
    const double r = f.residual_bound(V.col(i), lambda) + 4 * kUnitRoundoff * (mu + std::abs(lambda));
    *nearest_distance = std::min(*nearest_distance, std::abs(lambda) - r);
    if (mu + lambda - r > 0) out.push_back({mu + lambda - r, mu + lambda + r});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  return true;
}

}  // namespace

SingularValueCount count_singular_values_below(const Mat& K, double mu, int nearest, const DenseDevice& device) {
  if (!(mu > 0) || !std::isfinite(mu)) throw std::invalid_argument("inertia count: shift must be positive and finite");
  if (K.size() == 0) throw std::invalid_argument("inertia count: empty matrix");
  if (!K.allFinite()) throw std::invalid_argument("inertia count: matrix contains NaN or inf");
  const auto t0 = Clock::now();
  SingularValueCount c;
  c.mu = mu;
  const AugmentedLdlt f(K, mu, device);
  c.zero_pivot = f.zero_pivot();
  c.where = f.where();
  c.below = f.negative_count() - std::max(K.rows(), K.cols());
  c.delta = f.rounding_radius();
  const Index k = nearest < 0 ? std::min<Index>(c.below + 1, 9) : nearest;
  if (!c.zero_pivot && nearest != 0 && k >= 1) {  // k < 1: a negative count (μ within rounding of 0)
    double distance = 0;
    if (nearest_singular_values(f, mu, k, c.nearest, &distance)) c.decided = distance > c.delta;
  }
  c.seconds = seconds_since(t0);
  return c;
}

namespace {

// Intervals (each holding a singular value; from any shift's residuals, inertia.h) that place every
// singular value below μ − δ of the count c: a largest set of pairwise disjoint ones lying below
// μ − δ (earliest upper end first), when it has c.below members. Disjoint intervals hold distinct
// singular values, and (C) allows at most c.below below μ − δ, so then each holds exactly one and
// none lies outside them: σ_min is in the lowest. Pooling the first shift's intervals (taken near
// σ̂, so they hold the bottom values) with a later shift's is what lets a count far above σ̂ place
// σ_min: its own nearest intervals are the values near its shift.
bool all_located(const SingularValueCount& c, const std::vector<SingularInterval>& pool, Index all,
                 SingularInterval& lowest) {
  if (c.below < 1 || c.below > all) return false;
  std::vector<SingularInterval> candidates;
  for (const auto& s : pool)
    if (s.hi < c.mu - c.delta) candidates.push_back(s);
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.hi < b.hi; });
  std::vector<SingularInterval> disjoint;
  for (const auto& s : candidates)
    if (disjoint.empty() || disjoint.back().hi < s.lo) disjoint.push_back(s);
  if (static_cast<Index>(disjoint.size()) != c.below) return false;
  lowest = disjoint.front();
  return true;
}

void certify_located(const SingularValueCount& c, const SingularInterval& lowest, CertifiedExtremes& out,
                     std::ostringstream& note) {
  out.sigma_min_lo = lowest.lo;
  out.sigma_min_hi = std::min(out.sigma_min_hi, lowest.hi);  // the interval holds σ_min: both ends proven
  out.min_certified = true;
  note << "N(" << fmt(c.mu) << ")=" << c.below << " all located (delta " << fmt(c.delta) << ") ";
}

// A count that saw a value bounds σ_min above: below ≥ 1 ⇒ σ_min < μ + δ (C).
void bound_above(const SingularValueCount& c, CertifiedExtremes& out) {
  if (c.below >= 1) out.sigma_min_hi = std::min(out.sigma_min_hi, c.mu + c.delta);
}

// A count of 0 at μ: σ_min ≥ μ − δ, a certificate only where that is positive.
void certify_by_zero_count(const SingularValueCount& c, CertifiedExtremes& out, std::ostringstream& note) {
  if (c.mu - c.delta > 0) {
    out.sigma_min_lo = c.mu - c.delta;
    out.min_certified = true;
    note << "N(" << fmt(c.mu) << ")=0 (delta " << fmt(c.delta) << ") ";
  } else {
    note << "sigma_min not certified: N(" << fmt(c.mu) << ")=0 but delta " << fmt(c.delta) << " is wider than the shift ";
  }
}

// σ_min from the count at μ₁ = 1.01·σ̂ (header: nearest intervals). When the rounding radius δ₁
// is wider than a quarter of that 1 % margin, the interval of σ_min may not lie below μ₁ − δ₁ and
// the count cannot place it (or the count is 0, which proves only σ_min ≥ μ₁ − δ₁); one more count
// at μ₂ = σ̂ + max(1 %, 4 δ₁) (δ₂ ≈ δ₁: both are set by the factorisations' growth) places it with
// the intervals of both shifts, however wide δ₁ is against σ̂ (Bunch–Kaufman's δ on a GPU was 36 %
// of σ_min at κ 3e6; at κ 1e12 δ exceeds σ_min on either pivoting), and keeps the bracket as tight
// as the intervals. Failing that: a count of 0 at μ₁, or one just below σ̂, gives σ_min ≥ μ − δ
// (a bracket δ wide).
void certify_bottom(const Mat& K, double estimate, const DenseDevice& device, CertifiedExtremes& out,
                    std::ostringstream& note) {
  const Index all = std::min(K.rows(), K.cols());
  const SingularValueCount c1 = count_singular_values_below(K, 1.01 * estimate, -1, device);
  ++out.factorisations;
  out.within_1pct = c1.below;
  bound_above(c1, out);
  std::vector<SingularInterval> pool = c1.nearest;
  SingularInterval lowest;
  if (all_located(c1, pool, all, lowest)) return certify_located(c1, lowest, out, note);
  if (c1.delta > 0.0025 * estimate) {
    const SingularValueCount c2 = count_singular_values_below(K, estimate + std::max(0.01 * estimate, 4 * c1.delta), -1, device);
    ++out.factorisations;
    bound_above(c2, out);
    pool.insert(pool.end(), c2.nearest.begin(), c2.nearest.end());
    if (all_located(c2, pool, all, lowest)) {
      certify_located(c2, lowest, out, note);
      // A count of 0 at μ₁ proves σ_min ≥ μ₁ − δ₁ too: kept, so a claim below it is refuted.
      if (c1.below == 0 && c1.mu > c1.delta) out.sigma_min_lo = std::max(out.sigma_min_lo, c1.mu - c1.delta);
      return;
    }
  }
  if (c1.below == 0) return certify_by_zero_count(c1, out, note);
  // A cluster the shift-invert could not separate: confirm a lower end by a count of 0.
  double below_lo = estimate;  // the lowest interval below μ₁ − δ₁, if any
  for (const auto& s : c1.nearest)
    if (s.hi < c1.mu - c1.delta) below_lo = std::min(below_lo, s.lo);
  const double mu0 = (1 - 1e-3) * below_lo;
  const SingularValueCount c0 = count_singular_values_below(K, mu0, 0, device);
  ++out.factorisations;
  if (c0.below == 0) return certify_by_zero_count(c0, out, note);
  // A value below μ₀ + δ₀ (C): an upper end for σ_min, which certify_extremes holds against the
  // claim's lower end (a claim above it is refuted, not kept).
  bound_above(c0, out);
  note << "sigma_min not certified: N(" << fmt(mu0) << ")=" << c0.below << " (delta " << fmt(c0.delta) << ") ";
}

// y = TᵀT x for a tall T (Spectra's operator concept): the Gram operator whose top Ritz vector
// sigma_max_lower_end uses.
class TallGramOp {
 public:
  using Scalar = double;
  explicit TallGramOp(const Mat& T) : T_(T), tmp_(T.rows()) {}
  Index rows() const { return T_.cols(); }
  Index cols() const { return T_.cols(); }
  void perform_op(const double* x, double* y) const {
    tmp_.noalias() = T_ * Eigen::Map<const Vec>(x, T_.cols());
    Eigen::Map<Vec>(y, T_.cols()).noalias() = T_.transpose() * tmp_;
  }

 private:
  const Mat& T_;
  mutable Vec tmp_;
};

}  // namespace

double sigma_max_lower_end(const Mat& K) {
  if (K.size() == 0 || !K.allFinite()) return 0.0;
  const double top = K.cwiseAbs().maxCoeff();
  if (!(top > 0)) return 0.0;
  const bool tall = K.rows() >= K.cols();
  // The search for x: the tall side T scaled by a power of two (max |entry| in [1, 2)) so that TᵀT
  // neither underflows (entries ≲ 1e-154) nor overflows; its rounding only moves x, which the
  // bound below does not trust.
  const double scale = std::ldexp(1.0, -std::ilogb(top));
  const Mat T = tall ? Mat(K * scale) : Mat(K.transpose() * scale);
  const Index n = T.cols();
  Vec x;
  double lam = 0;
  Index products = 0;
  const Vec start = detail::second_start(n);  // not Spectra's fixed start (lu_lanczos.h, σ_max check)
  TallGramOp gram(T);
  if (n < kFastMinSize) {
    x = Eigen::BDCSVD<Mat>(T, Eigen::ComputeThinV).matrixV().col(0);
  } else if (!detail::top_eigenvalue(gram, &lam, &products, &x, &start)) {
    x = start;  // Lanczos failed: power steps, each giving a valid (if looser) bound
    Vec y(n);
    for (int step = 0; step < 50; ++step) {
      gram.perform_op(x.data(), y.data());
      const double ny = y.stableNorm();
      if (!(ny > 0) || !std::isfinite(ny)) break;
      x = y / ny;
    }
  }
  // ‖K x‖ / ‖x‖ ≤ σ_max (Courant–Fischer; Kᵀ for a wide K, same σ_max), computed in fp64 from K
  // itself and its rounding taken off: with p the inner dimension, fl(K x) = K x + e with
  // |e| ≤ γ_p |K||x| + p·η (η = the smallest subnormal: underflow), so ‖K x‖ ≥ ‖fl(K x)‖ − γ_p ‖|K|‖₂ ‖x‖
  // − √m·p·η with ‖|K|‖₂ ≤ sqrt(‖K‖₁‖K‖_∞) (abs_norm_bound); the two stableNorms and the quotient
  // are within γ_{m+n+8} relative (each norm a sum of squares within γ of its length + 2, a
  // square root and a division within u each). Guarded by CertifyReport.ASigmaMaxAboveTheSpectrumIsNotCertified.
  const Index p = x.size(), m = tall ? K.rows() : K.cols();
  const Vec Kx = tall ? Vec(K * x) : Vec(K.transpose() * x);
  const double nx = x.stableNorm();
  if (!(nx > 0) || !std::isfinite(nx)) return 0.0;
  const double g = gamma_of(m + p + 8);  // 2(m+p+8)u/(1 − ·): at least γ_{m+p+8}
  const double gp = gamma_of(p);
  const double underflow = std::sqrt(static_cast<double>(m)) * static_cast<double>(p) *
                           std::numeric_limits<double>::denorm_min();
  const double lo = (Kx.stableNorm() / nx) * (1 - g) - (gp * abs_norm_bound(K) + underflow / nx) * (1 + g);
  return std::max(0.0, lo);
}

CertifiedExtremes certify_extremes(const Mat& K, const ClaimedExtremes& claim, bool bottom_counts,
                                   const DenseDevice& device) {
  const auto t0 = Clock::now();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  CertifiedExtremes out;
  // The inner ends: the claim's where they are proofs (ClaimedExtremes), else σ_max's from
  // Courant–Fischer on a vector of our own (sigma_max_lower_end) and σ_min's counted below.
  const bool loose = !(claim.sigma_min_lo > 0) || claim.sigma_min_hi > 1.05 * claim.sigma_min_lo;
  out.sigma_max_lo = claim.courant_fischer ? claim.sigma_max_lo : 0.0;
  if (!claim.courant_fischer || loose) out.sigma_max_lo = std::max(out.sigma_max_lo, sigma_max_lower_end(K));
  out.sigma_min_hi = claim.courant_fischer ? claim.sigma_min_hi : kInf;
  double sigma_max_hi = claim.sigma_max_hi;
  std::ostringstream note;
  double estimate = claim.sigma_min_hi;  // where σ_min is counted, and above which a count refutes the claim
  if (loose) {
    // A loose claim: an exact σ_min estimate first (LU + inverse Lanczos, 1/4 of one count's flops).
    // Its σ_max only says where to count the top: the lower end stays the Courant–Fischer one above.
    const ConditionReport fast = device.condition_fast(K, "certify");
    estimate = std::min(claim.sigma_min_hi, fast.sigma_min * (1 + 1e-10));
    sigma_max_hi = std::max(sigma_max_hi, fast.sigma_max);
  }
  if (estimate > 0) certify_bottom(K, estimate, device, out, note);
  if (out.min_certified && out.sigma_min_lo > std::min(estimate, out.sigma_min_hi)) {
    out.min_certified = false;  // the claim (or a count's upper end) contradicts the count
    out.refuted = true;
    note << "inconsistent: count puts sigma_min above the claimed upper end ";
  } else if (!out.min_certified && out.sigma_min_hi < claim.sigma_min_lo) {
    // A count saw a singular value below the claim's lower end (σ_min < μ + δ < claimed lo, (C)):
    // the claim is false, not merely unproven, and its κ_hi (and rank) must not stand. Found by a
    // review: a not-converged GKL row of K_ffn kept κ_hi 5.36 and full rank while its own note said
    // N(2.69e-17) = 2. Guarded by CertifyReport.ACountBelowTheClaimedLowerEndRefutesTheClaim.
    out.refuted = true;
    note << "refuted: a count puts sigma_min below " << fmt(out.sigma_min_hi) << ", under the claimed lower end "
         << fmt(claim.sigma_min_lo) << " ";
  } else if (out.min_certified && !(out.sigma_min_hi < kInf)) {
    out.min_certified = false;  // a dense estimate, and no count saw a value to bound σ_min above
    note << "sigma_min's upper end not proven (the route's value is an estimate, and no count saw a value) ";
  }
  if (bottom_counts && out.min_certified) {
    out.within_10pct = count_singular_values_below(K, 1.1 * std::min(estimate, out.sigma_min_hi), 0, device).below;
    ++out.factorisations;
  }
  const Index all = std::min(K.rows(), K.cols());
  const SingularValueCount top = count_singular_values_below(K, (1 + 1e-6) * sigma_max_hi, 0, device);
  ++out.factorisations;
  out.where = top.where;
  if (top.below == all) {
    out.sigma_max_hi = top.mu + top.delta;
    out.max_certified = true;
    note << "N(" << fmt(top.mu) << ")=" << all << " (delta " << fmt(top.delta) << ")";
  } else {
    out.sigma_max_hi = std::numeric_limits<double>::infinity();
    out.refuted = true;  // a singular value lies above (1 + 1e-6)·σ_max_hi − δ
    note << "sigma_max not certified: N(" << fmt(top.mu) << ")=" << top.below << " < " << all << " ";
  }
  out.note = note.str();
  out.seconds = seconds_since(t0);
  return out;
}

CertifyMode parse_certify_mode(const std::string& s) {
  if (s == "none") return CertifyMode::kNone;
  if (s == "inertia") return CertifyMode::kInertia;
  if (s == "auto") return CertifyMode::kAuto;
  throw std::invalid_argument("unknown certify mode '" + s + "' (expected auto|inertia|none)");
}

std::string to_string(CertifyMode m) {
  switch (m) {
    case CertifyMode::kNone: return "none";
    case CertifyMode::kInertia: return "inertia";
    case CertifyMode::kAuto: return "auto";
  }
  return "?";
}

namespace {

// v moved into [lo, hi] (a certified interval); `moved` says whether it had to be.
double into(double v, double lo, double hi, bool& moved) {
  const double w = std::clamp(v, lo, hi);
  moved = moved || w != v;
  return w;
}

}  // namespace

ConditionReport certify_report(ConditionReport r, const Mat& K, const ClaimedExtremes& claim, const DenseDevice& device) {
  if (r.status == Status::kSingular) {
    r.note += (r.note.empty() ? "" : "; ") + std::string("not certified: singular");
    return r;
  }
  const CertifiedExtremes c = certify_extremes(K, claim, true, device);
  if (c.refuted && r.method.rfind(device.svd_method(), 0) != 0) {
    // The route's own numbers are wrong: the full spectrum answers, and is counted in turn.
    ConditionReport s = device.condition_svd(K, r.matrix);
    s.space = r.space;
    s.head = r.head;
    s.seconds += r.seconds + c.seconds;
    const std::string why = "inertia refuted " + r.method + " (" + c.note + "); dense SVD used";
    ConditionReport certified = certify_report(s, K, ClaimedExtremes::estimate(s.sigma_min, s.sigma_max), device);
    certified.note = why + "; " + certified.note;
    return certified;
  }
  r.seconds += c.seconds;
  r.within_1pct = c.within_1pct;
  r.within_10pct = c.within_10pct;
  const std::string what = "inertia: " + c.note;
  if (c.min_certified && c.max_certified && c.sigma_min_lo > 0) {
    r.status = Status::kCertified;
    r.method += c.where == "cpu" ? "+inertia" : "+inertia-" + c.where;
    constexpr double kInf = std::numeric_limits<double>::infinity();  // each quotient rounded outward
    r.kappa_lo = std::nextafter(c.sigma_max_lo / c.sigma_min_hi, -kInf);
    r.kappa_hi = std::nextafter(c.sigma_max_hi / c.sigma_min_lo, kInf);
    const double was = r.kappa;
    bool moved = false;
    r.sigma_min = into(r.sigma_min, c.sigma_min_lo, c.sigma_min_hi, moved);
    r.sigma_max = into(r.sigma_max, c.sigma_max_lo, c.sigma_max_hi, moved);
    if (moved) r.kappa = r.sigma_max / r.sigma_min;
    r.kappa = into(r.kappa, r.kappa_lo, r.kappa_hi, moved);
    r.note = what;
    if (moved) r.note += "; the route's kappa " + fmt(was) + " lay outside the certified intervals: moved into them";
  } else {
    r.note += (r.note.empty() ? "" : "; ") + what;
  }
  return r;
}

}  // namespace jacond
