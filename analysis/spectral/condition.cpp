#include "analysis/core/clock.h"
#include "analysis/spectral/condition.h"

#include <lapacke.h>

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

std::string to_string(Status s) {
  switch (s) {
    case Status::kExact: return "exact";
    case Status::kCertified: return "certified";
    case Status::kBracket: return "bracket";
    case Status::kSingular: return "singular";
    case Status::kNotConverged: return "not-converged";
  }
  return "?";
}

double noise_floor(Index rows, Index cols, double sigma_max) {
  return static_cast<double>(std::max(rows, cols)) * std::numeric_limits<double>::epsilon() * sigma_max;
}

namespace {

using Clock = std::chrono::steady_clock;

// Fills σ_min/σ_max-derived fields: κ, the bracket, and the status (exact or singular).
void finish_report(ConditionReport& r) {
  const double tol = noise_floor(r.rows, r.cols, r.sigma_max);
  if (r.sigma_max == 0.0) {
    r.status = Status::kSingular;
    r.kappa = r.kappa_hi = std::numeric_limits<double>::infinity();
    r.kappa_lo = std::numeric_limits<double>::infinity();
    return;
  }
  if (r.sigma_min <= tol) {
    r.status = Status::kSingular;
    r.kappa = r.kappa_hi = std::numeric_limits<double>::infinity();
    r.kappa_lo = r.sigma_max / tol;
  } else {
    r.status = Status::kExact;
    r.kappa = r.kappa_lo = r.kappa_hi = r.sigma_max / r.sigma_min;
  }
}

// y = AᵀA x with A dense: the operator whose top eigenvalue is σ_max².
class GramOp {
 public:
  using Scalar = double;
  explicit GramOp(const Mat& A) : A_(A), tmp_(A.rows()) {}
  Index rows() const { return A_.cols(); }
  Index cols() const { return A_.cols(); }
  void perform_op(const double* x, double* y) const {
    tmp_.noalias() = A_ * Eigen::Map<const Vec>(x, A_.cols());
    Eigen::Map<Vec>(y, A_.cols()).noalias() = A_.transpose() * tmp_;
  }
 private:
  const Mat& A_;
  mutable Vec tmp_;
};

// The CPU backend of lu_lanczos_extremes (analysis/spectral/lu_lanczos.h): S is a square A
// (LAPACKE getrf with partial pivoting, in place) or the upper-triangular R of a tall A's QR (no
// factorisation left to do). Before the sweep that overflowed was checked, LAPACKE's refusal of a
// NaN x (info = −8) went unnoticed and the unsolved x was returned as y.
class CpuLuBackend {
 public:
  CpuLuBackend(Mat& S, bool triangular) : S_(S), triangular_(triangular), gram_(S) {}
  Index order() const { return S_.rows(); }
  void gram(const double* x, double* y) const { gram_.perform_op(x, y); }
  FactorOutcome factor(double /*sigma_max*/) {
    if (triangular_) return (S_.diagonal().array() == 0.0).any() ? FactorOutcome::kExactlySingular : FactorOutcome::kFactored;
    const lapack_int n = static_cast<lapack_int>(S_.rows());
    ipiv_.resize(S_.rows());
    const lapack_int info = LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, S_.data(), n, ipiv_.data());
    // info > 0: U(info, info) is exactly zero, A is exactly singular. That is the answer, not a
    // failure (analysis/core/lapack.h): the caller's SVD gives the rank and status `singular`.
    if (info > 0) return FactorOutcome::kExactlySingular;
    check_lapack("LAPACKE_dgetrf", info);
    return FactorOutcome::kFactored;
  }
  // y = A⁻¹ A⁻ᵀ x (or R⁻¹ R⁻ᵀ x). The _work entry points: plain LAPACKE_dgetrs/dtrtrs scan the
  // whole n × n factor for NaN on every call (12 % of condition_fast's time at n = 3200). The
  // factor is finite (condition_fast checked A; a factorisation of a finite matrix with nonzero
  // pivots is finite) and x is checked here.
  void inverse_gram(const double* x, double* y) const {
    const lapack_int n = static_cast<lapack_int>(S_.rows());
    if (!Eigen::Map<const Vec>(x, n).allFinite()) throw NonFiniteSolve();
    std::copy(x, x + n, y);
    if (!triangular_) {  // Aᵀ z = x, then A y = z
      check_lapack("LAPACKE_dgetrs", LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'T', n, 1, S_.data(), n, ipiv_.data(), y, n));
      check_lapack("LAPACKE_dgetrs", LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'N', n, 1, S_.data(), n, ipiv_.data(), y, n));
    } else {  // Rᵀ z = x, then R y = z
      check_lapack("LAPACKE_dtrtrs", LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'T', 'N', n, 1, S_.data(), n, y, n));
      check_lapack("LAPACKE_dtrtrs", LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'N', 'N', n, 1, S_.data(), n, y, n));
    }
    if (!Eigen::Map<const Vec>(y, n).allFinite()) throw NonFiniteSolve();
  }
 private:
  Mat& S_;
  const bool triangular_;
  GramOp gram_;
  std::vector<lapack_int> ipiv_;
};

}  // namespace

Vec singular_values(Mat A) {
  const lapack_int m = static_cast<lapack_int>(A.rows()), n = static_cast<lapack_int>(A.cols());
  Vec s(std::min(m, n));
  if (s.size() == 0) return s;
  if (!A.allFinite()) throw std::invalid_argument("singular_values: matrix contains NaN or inf");
  double dummy = 0;
  check_lapack("LAPACKE_dgesdd", LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', m, n, A.data(), m, s.data(), &dummy, 1, &dummy, 1));
  return s;  // LAPACK returns them in descending order
}

ConditionReport report_from_singular_values(const std::string& matrix, Index rows, Index cols,
                                            const Vec& sv, const std::string& method) {
  ConditionReport r;
  r.matrix = matrix;
  r.rows = rows;
  r.cols = cols;
  r.method = method;
  if (sv.size() == 0) throw std::invalid_argument("report_from_singular_values: empty spectrum for " + matrix);
  r.sigma_max = sv.maxCoeff();
  // A wide or tall matrix has min(rows, cols) singular values; σ_min is the smallest of them.
  r.sigma_min = sv.minCoeff();
  const double tol = noise_floor(rows, cols, r.sigma_max);
  r.rank = (sv.array() > tol).count();
  finish_report(r);
  return r;
}

ConditionReport condition_svd(const Mat& A, const std::string& matrix) {
  const auto t0 = Clock::now();
  ConditionReport r = report_from_singular_values(matrix, A.rows(), A.cols(), singular_values(A), "dense-svd");
  r.seconds = seconds_since(t0);
  return r;
}

ConditionReport condition_fast(Mat A, const std::string& matrix) {
  if (!A.allFinite()) throw std::invalid_argument("condition_fast: " + matrix + " contains NaN or inf");
  const Index given_rows = A.rows(), given_cols = A.cols();  // the report's shape: the matrix as given
  if (A.rows() < A.cols()) A.transposeInPlace();  // σ(A) = σ(Aᵀ); work with the tall side
  const Index rows = A.rows(), cols = A.cols();
  if (cols < kFastMinSize) {
    ConditionReport r = condition_svd(A, matrix);
    r.rows = given_rows;
    r.cols = given_cols;
    return r;
  }
  const auto t0 = Clock::now();
  ConditionReport r;
  r.matrix = matrix;
  r.rows = given_rows;
  r.cols = given_cols;
  const bool square = rows == cols;
  r.method = square ? "dense-lu-lanczos" : "dense-qr-lanczos";

  // Reduce a tall A to its square R factor (σ(A) = σ(R)).
  Mat F;
  if (!square) {
    std::vector<double> tau(cols);
    check_lapack("LAPACKE_dgeqrf", LAPACKE_dgeqrf(LAPACK_COL_MAJOR, rows, cols, A.data(), rows, tau.data()));
    F = A.topRows(cols).triangularView<Eigen::Upper>();
    A.resize(0, 0);
  }
  Mat& S = square ? A : F;  // square matrix with the same singular values
  // Kept only for the rare SVD fallback after getrf has overwritten A (square case).
  const Mat original = square ? A : Mat();
  // F (tall: the R of A = QR, untouched by the solves) or the kept original: A v for the check.
  const Mat& unfactored = square ? original : F;
  CpuLuBackend backend(S, !square);
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  r.products = e.products;
  r.sigma_max = e.sigma_max;
  r.sigma_min = e.sigma_min;
  std::string why;  // empty: the extremes stand
  if (e.outcome == LuLanczosExtremes::Outcome::kExactlySingular)
    why = "exactly singular pivot";
  else if (e.outcome != LuLanczosExtremes::Outcome::kOk)
    why = !e.why.empty() ? e.why : "lanczos did not converge (or matrix numerically singular)";
  else
    why = unsupported_sigma_min(e, (unfactored * e.v_min).norm(), noise_floor(given_rows, given_cols, e.sigma_max));
  if (!why.empty()) {
    // Answer exactly with the SVD. A was overwritten by its LU factors: the SVD needs the original.
    ConditionReport s = condition_svd(unfactored, matrix);
    s.rows = given_rows;
    s.cols = given_cols;
    s.note = why + "; dense SVD used";
    s.seconds = seconds_since(t0);
    return s;
  }
  finish_extremes_report(r);
  r.seconds = seconds_since(t0);
  return r;
}

void finish_extremes_report(ConditionReport& r) {
  finish_report(r);
  // Rank is not available without the full spectrum: report the lower bound we know (full rank
  // if σ_min is above the floor).
  r.rank = r.status == Status::kExact ? std::min(r.rows, r.cols) : -1;
  if (r.status == Status::kSingular) r.note = "rank unknown (fast route); --kappa svd (Python: method='svd') gives it";
}

void finish_not_converged_report(ConditionReport& r, const std::string& why) {
  r.status = Status::kNotConverged;
  r.kappa = r.kappa_lo = r.kappa_hi = std::numeric_limits<double>::quiet_NaN();
  r.rank = -1;
  r.note = why;
}

ConditionReport condition_blockdiag(const std::vector<Mat>& blocks, const std::string& matrix,
                                    const std::function<void()>& before_block) {
  const auto t0 = Clock::now();
  if (blocks.empty()) throw std::invalid_argument("condition_blockdiag: no blocks for " + matrix);
  Index rows = 0, cols = 0, count = 0;
  for (const Mat& B : blocks) {
    rows += B.rows();
    cols += B.cols();
    count += std::min(B.rows(), B.cols());
  }
  Vec all(count);
  Index k = 0;
  for (const Mat& B : blocks) {
    if (before_block) before_block();
    const Vec s = singular_values(B);
    all.segment(k, s.size()) = s;
    k += s.size();
  }
  // A block-diagonal matrix with all blocks tall/square has exactly these singular values; if
  // any block is wide, the remaining singular values of the whole matrix are zeros.
  if (count < std::min(rows, cols)) {
    Vec padded = Vec::Zero(std::min(rows, cols));
    padded.head(count) = all;
    all = padded;
  }
  ConditionReport r = report_from_singular_values(matrix, rows, cols, all, "dense-svd-blockdiag");
  r.seconds = seconds_since(t0);
  return r;
}

double spectral_norm(const Mat& A) {
  if (std::min(A.rows(), A.cols()) < kFastMinSize) return singular_values(A).maxCoeff();
  // GramOp keeps a reference: it must be to a matrix that outlives it. (It was once given
  // `tall ? A : Mat(Aᵀ)`, a temporary copy freed at once; the Lanczos run read freed memory.)
  if (A.rows() < A.cols()) return spectral_norm(Mat(A.transpose()));
  GramOp gram(A);
  double lam = 0;
  Index products = 0;
  Vec v;
  if (!detail::top_eigenvalue(gram, &lam, &products, &v)) return singular_values(A).maxCoeff();
  const double sigma = std::sqrt(std::max(lam, 0.0));
  // The σ_max check of lu_lanczos.h: a Ritz value its own vector does not support answers by the SVD.
  if (!sigma_max_supported(sigma, (A * v).stableNorm(), noise_floor(A.rows(), A.cols(), sigma)))
    return singular_values(A).maxCoeff();
  return sigma;
}

std::string format_report(const ConditionReport& r) {
  std::ostringstream os;
  os.precision(6);
  os << r.matrix;
  if (r.head >= 0) os << "[h" << r.head << "]";
  if (r.space != "full") os << " on " << r.space;
  os << " " << r.rows << "x" << r.cols << " " << r.method << " " << to_string(r.status)
     << " sigma_max=" << r.sigma_max << " sigma_min=" << r.sigma_min;
  if (r.status == Status::kSingular)
    os << " kappa>=" << r.kappa_lo;
  else
    os << " kappa=" << r.kappa;
  os << " rank=" << r.rank;
  return os.str();
}

}  // namespace jacond
