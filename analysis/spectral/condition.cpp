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
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// Thrown by InverseGramOp when (AᵀA)⁻¹ x overflows, in its result or, through Lanczos's own
// normalisation of a huge result, in the next x: A is numerically singular. A numerical outcome,
// not a failure: condition_fast falls back to the SVD. (Before info was checked, LAPACKE's
// refusal of the NaN x, info = −8, went unnoticed and the unsolved x was returned as y.)
class NonFiniteSolve : public std::runtime_error {
 public:
  NonFiniteSolve() : std::runtime_error("(A^T A)^-1 x overflowed: A is numerically singular") {}
};

// y = (AᵀA)⁻¹ x = A⁻¹ A⁻ᵀ x through a factorisation of square A: its top eigenvalue is
// 1/σ_min². `F` holds getrf's packed LU with pivots, or an upper-triangular R (no pivots); the
// caller has checked that no pivot / diagonal entry is exactly zero, so every solve is defined and
// a nonzero info is a failure (LapackError).
class InverseGramOp {
 public:
  using Scalar = double;
  InverseGramOp(const Mat& F, const std::vector<lapack_int>* ipiv) : F_(F), ipiv_(ipiv) {}
  Index rows() const { return F_.rows(); }
  Index cols() const { return F_.rows(); }
  void perform_op(const double* x, double* y) const {
    const lapack_int n = static_cast<lapack_int>(F_.rows());
    if (!Eigen::Map<const Vec>(x, n).allFinite()) throw NonFiniteSolve();
    std::copy(x, x + n, y);
    // The _work entry points: plain LAPACKE_dgetrs/dtrtrs scan the whole n × n factor for NaN on
    // every call (12 % of condition_fast's time at n = 3200). F is finite (condition_fast checked
    // A; a factorisation of a finite matrix with nonzero pivots is finite) and x is checked above.
    if (ipiv_) {
      // Solve Aᵀ z = x, then A y = z.
      check_lapack("LAPACKE_dgetrs", LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'T', n, 1, F_.data(), n, ipiv_->data(), y, n));
      check_lapack("LAPACKE_dgetrs", LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'N', n, 1, F_.data(), n, ipiv_->data(), y, n));
    } else {
      // Solve Rᵀ z = x, then R y = z.
      check_lapack("LAPACKE_dtrtrs", LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'T', 'N', n, 1, F_.data(), n, y, n));
      check_lapack("LAPACKE_dtrtrs", LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'N', 'N', n, 1, F_.data(), n, y, n));
    }
    if (!Eigen::Map<const Vec>(y, n).allFinite()) throw NonFiniteSolve();
  }
 private:
  const Mat& F_;
  const std::vector<lapack_int>* ipiv_;
};

// Largest eigenvalue of a symmetric positive semi-definite operator by Spectra's Lanczos.
// Returns false if it did not converge or overflowed (NonFiniteSolve, or Spectra's tridiagonal
// eigensolver failing on non-finite Ritz values); a LapackError is a failure and propagates.
// `products` accumulates operator applications.
template <typename Op>
bool top_eigenvalue(Op& op, double tol, double* value, Index* products) {
  const Index n = op.rows();
  const Index ncv = std::min<Index>(n, 24);
  Spectra::SymEigsSolver<Op> eigs(op, 1, ncv);
  try {
    eigs.init();  // already one product
    eigs.compute(Spectra::SortRule::LargestAlge, 500, tol);
  } catch (const LapackError&) {
    throw;
  } catch (const std::runtime_error&) {
    // Overflow (an inverse of a numerically singular matrix): no answer here.
    *products += eigs.num_operations();
    return false;
  }
  *products += eigs.num_operations();
  if (eigs.info() != Spectra::CompInfo::Successful) return false;
  *value = eigs.eigenvalues()(0);
  return std::isfinite(*value);
}

constexpr double kLanczosTol = 1e-13;
constexpr Index kFastMinSize = 48;  // below this the SVD is cheaper than setting up Lanczos

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
  if (A.rows() < A.cols()) A.transposeInPlace();  // σ(A) = σ(Aᵀ); work with the tall side
  const Index rows = A.rows(), cols = A.cols();
  if (cols < kFastMinSize) {
    ConditionReport r = condition_svd(A, matrix);
    return r;
  }
  const auto t0 = Clock::now();
  ConditionReport r;
  r.matrix = matrix;
  r.rows = rows;
  r.cols = cols;
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
  const Mat& S = square ? A : F;  // square matrix with the same singular values
  // Kept only for the rare SVD fallback after getrf has overwritten A (square case).
  const Mat original = square ? A : Mat();

  double lam_max = 0;
  Index products = 0;
  GramOp gram(S);
  bool ok = top_eigenvalue(gram, kLanczosTol, &lam_max, &products);
  r.sigma_max = std::sqrt(std::max(lam_max, 0.0));

  std::vector<lapack_int> ipiv;
  bool exactly_singular = false;
  if (ok && square) {
    ipiv.resize(cols);
    const lapack_int info = LAPACKE_dgetrf(LAPACK_COL_MAJOR, cols, cols, A.data(), cols, ipiv.data());
    // info > 0: U(info, info) is exactly zero, A is exactly singular. That is the answer, not a
    // failure (analysis/core/lapack.h): the SVD below gives the rank and status `singular`.
    exactly_singular = info > 0;
    if (!exactly_singular) check_lapack("LAPACKE_dgetrf", info);
  } else if (ok) {
    exactly_singular = (F.diagonal().array() == 0.0).any();
  }
  if (ok && !exactly_singular) {
    InverseGramOp inv(square ? A : F, square ? &ipiv : nullptr);
    double lam_inv = 0;
    ok = top_eigenvalue(inv, kLanczosTol, &lam_inv, &products);
    r.sigma_min = ok && lam_inv > 0 ? 1.0 / std::sqrt(lam_inv) : 0.0;
  } else if (exactly_singular) {
    ok = false;  // let the SVD give the rank and the exact floor
  }
  r.products = products;
  if (!ok) {
    // Lanczos did not converge (pathological clustering): answer exactly with the SVD.
    // A was overwritten by its LU factors: the SVD needs the original.
    ConditionReport s = square ? condition_svd(original, matrix) : condition_svd(F, matrix);
    s.rows = rows;
    s.cols = cols;
    s.note = exactly_singular ? "exactly singular pivot; dense SVD used" : "lanczos did not converge (or matrix numerically singular); dense SVD used";
    s.seconds = seconds_since(t0);
    return s;
  }
  // Rank is not available without the full spectrum: report the lower bound we know
  // (full rank if σ_min is above the floor).
  finish_report(r);
  r.rank = r.status == Status::kExact ? cols : -1;
  if (r.status == Status::kSingular) r.note = "rank unknown (fast route); use --spectrum full";
  r.seconds = seconds_since(t0);
  return r;
}

ConditionReport condition_blockdiag(const std::vector<Mat>& blocks, const std::string& matrix) {
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
  GramOp gram(A.rows() >= A.cols() ? A : Mat(A.transpose()));
  double lam = 0;
  Index products = 0;
  if (!top_eigenvalue(gram, kLanczosTol, &lam, &products)) return singular_values(A).maxCoeff();
  return std::sqrt(std::max(lam, 0.0));
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
