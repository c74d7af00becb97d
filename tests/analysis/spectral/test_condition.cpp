// Condition numbers: LAPACKE SVD against matrices with known singular values, the fast
// LU/QR + Lanczos route against the SVD, block-diagonal spectra, the singular status, and what
// becomes of LAPACK's failure codes (analysis/core/lapack.h).
#include <gtest/gtest.h>

#include <tuple>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>

#include "analysis/core/lapack.h"
#include "analysis/spectral/condition.h"
#include "support/constructed_spectrum.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace jacond {

// Failure messages print the status by name (gtest finds PrintTo by argument-dependent lookup).
void PrintTo(Status s, std::ostream* os) { *os << to_string(s); }

namespace {

using test::geometric;
using test::with_singular_values;

TEST(SingularValues, RecoverAConstructedSpectrum) {
  SCOPED_TRACE("seed=1");
  const Vec s = geometric(60, 1e6);
  const Vec got = singular_values(with_singular_values(s, 60, 60, 1));
  EXPECT_LT((got - s).cwiseAbs().maxCoeff() / s(0), 1e-13);
}

TEST(ConditionSvd, ExactAndRankOnAWellConditionedMatrix) {
  SCOPED_TRACE("seed=2");
  const ConditionReport r = condition_svd(with_singular_values(geometric(50, 1e3), 50, 50, 2), "M");
  EXPECT_EQ(r.status, Status::kExact);
  EXPECT_EQ(r.method, "dense-svd");
  EXPECT_EQ(r.rank, 50);
  EXPECT_NEAR(r.kappa / 1e3, 1.0, 1e-10);
  EXPECT_EQ(r.kappa_lo, r.kappa);
  EXPECT_EQ(r.kappa_hi, r.kappa);
}

TEST(ConditionSvd, RankDeficientIsSingularWithALowerBoundOnly) {
  SCOPED_TRACE("seed=3");
  Vec s = geometric(40, 10);
  s.tail(3).setZero();
  const ConditionReport r = condition_svd(with_singular_values(s, 40, 40, 3), "M");
  EXPECT_EQ(r.status, Status::kSingular);
  EXPECT_EQ(r.rank, 37);
  EXPECT_TRUE(std::isinf(r.kappa));
  // κ ≥ σ_max / tol with tol = 40·eps·σ_max: the claimed lower bound is 1/(40 eps) ≈ 1.1e14.
  EXPECT_NEAR(r.kappa_lo * 40 * std::numeric_limits<double>::epsilon(), 1.0, 1e-12);
}

struct FastCase {
  Index rows, cols;
  double kappa;
};

class FastVsSvd : public testing::TestWithParam<FastCase> {};

TEST_P(FastVsSvd, AgreeOnSigmaMaxSigmaMinAndKappa) {
  const FastCase c = GetParam();
  SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " kappa=" + std::to_string(c.kappa) +
               " seed=" + std::to_string(11 + c.rows));
  const Mat A = with_singular_values(geometric(std::min(c.rows, c.cols), c.kappa), c.rows, c.cols, 11 + c.rows);
  const ConditionReport svd = condition_svd(A, "A");
  const ConditionReport fast = condition_fast(A, "A");
  EXPECT_EQ(fast.status, Status::kExact) << fast.note;
  EXPECT_NE(fast.method, "dense-svd");
  EXPECT_NEAR(fast.sigma_max / svd.sigma_max, 1.0, test::kFastVsSvd);
  // Both routes find σ_min with absolute error O(eps·σ_max) (backward stability + Weyl), i.e.
  // relative error O(eps·κ): at κ = 1e8 no fp64 method can promise 1e-9, and the result then
  // depends on BLAS threading. The allowance is the first-order bound with constant 4.
  const double min_tol = std::max(test::kFastVsSvd, 4 * std::numeric_limits<double>::epsilon() * c.kappa);
  EXPECT_NEAR(fast.sigma_min / svd.sigma_min, 1.0, min_tol);
  EXPECT_NEAR(fast.kappa / c.kappa, 1.0, std::max(1e-9, min_tol));
  EXPECT_GT(fast.products, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FastVsSvd,
                         testing::Values(FastCase{120, 120, 10}, FastCase{200, 200, 1e4}, FastCase{150, 150, 1e8},
                                         FastCase{300, 120, 1e3}, FastCase{90, 160, 1e5}));

TEST(ConditionFast, ClusteredExtremesStillAgree) {
  // Many equal top and bottom singular values (as B_sa under the `ours` init).
  SCOPED_TRACE("seed=5");
  Vec s = Vec::Constant(150, 2.0);
  s.tail(50).setConstant(1e-3);
  const Mat A = with_singular_values(s, 150, 150, 5);
  const ConditionReport fast = condition_fast(A, "A");
  EXPECT_NEAR(fast.kappa / 2000.0, 1.0, 1e-9);
}

// A wide matrix is solved through its transpose (σ(A) = σ(Aᵀ)), but reported with the shape it
// was given, on both sides of kFastMinSize (the report said rows = 17, cols = 5 for a 5 × 17 A).
TEST(ConditionFast, AWideMatrixKeepsItsShapeInTheReport) {
  SCOPED_TRACE("seeds 7, 8");
  for (const auto& [rows, cols, seed] : {std::tuple<Index, Index, uint64_t>{5, 17, 7}, {60, 140, 8}}) {
    const Mat A = with_singular_values(geometric(rows, 1e3), rows, cols, seed);
    const ConditionReport fast = condition_fast(A, "A"), svd = condition_svd(A, "A");
    EXPECT_EQ(fast.rows, rows);
    EXPECT_EQ(fast.cols, cols);
    EXPECT_EQ(svd.rows, rows);
    EXPECT_NEAR(fast.kappa / svd.kappa, 1.0, 1e-9) << rows << "x" << cols;
  }
}

TEST(ConditionFast, SingularMatrixIsReportedSingular) {
  SCOPED_TRACE("seed=9");
  Vec s = geometric(100, 10);
  s(99) = 0.0;
  const ConditionReport fast = condition_fast(with_singular_values(s, 100, 100, 9), "A");
  EXPECT_EQ(fast.status, Status::kSingular) << fast.note;
  EXPECT_TRUE(std::isinf(fast.kappa));
}

// dgetrf's info > 0 (an exactly zero pivot U(60, 60)) is the numerical answer "exactly singular",
// not a failure: status `singular` from the SVD fallback, with the exact rank.
TEST(ConditionFast, ExactlyZeroPivotIsStatusSingularNotAnError) {
  Mat A = Mat::Identity(60, 60);
  A(59, 59) = 0.0;
  const ConditionReport r = condition_fast(A, "A");
  EXPECT_EQ(r.status, Status::kSingular);
  EXPECT_EQ(r.rank, 59);
  EXPECT_EQ(r.sigma_min, 0.0);
  EXPECT_NE(r.note.find("exactly singular pivot"), std::string::npos) << r.note;
}

// σ_min = 1e-200: (AᵀA)⁻¹ x overflows in the first solves. That is "numerically singular" (SVD
// fallback, status `singular`), in the LU (square) and the QR (tall) route alike. Before the
// solves' info was checked, the overflowed vector's NaNs were refused by LAPACKE (info = −8) and
// the unsolved input came back as the "solution"; now the overflow is caught where it happens.
TEST(ConditionFast, OverflowingInverseFallsBackToTheSvd) {
  Mat D = Mat::Identity(60, 60);
  D(59, 59) = 1e-200;
  Mat T = Mat::Zero(80, 60);
  T.topRows(60) = D;
  for (const Mat* A : {&D, &T}) {
    const ConditionReport r = condition_fast(*A, "A");
    SCOPED_TRACE(format_report(r) + " | " + r.note);
    EXPECT_EQ(r.status, Status::kSingular);
    EXPECT_EQ(r.method, "dense-svd");
    EXPECT_DOUBLE_EQ(r.sigma_min, 1e-200);
    EXPECT_EQ(r.rank, 59);
  }
}

// Spectra accepts a Ritz value once its residual is under tol·max(eps^(2/3), |θ|), an absolute
// floor that passed an unconverged θ at once for a small σ_max² or a small σ_min⁻²: κ = 1e4 came
// out as 8858 at scale 1e-8 and 9270 at 1e12, labelled exact. Each run now scales its operator by
// a power of two (lu_lanczos.h, "Scale"), so κ and σ do not depend on the matrix's scale.
TEST(ConditionFast, TinyAndHugeMatricesKeepTheirKappa) {
  SCOPED_TRACE("seeds 7, 8");
  const Mat square = with_singular_values(geometric(80, 1e4), 80, 80, 7);
  const Mat tall = with_singular_values(geometric(60, 1e4), 90, 60, 8);
  for (const Mat* A : {&square, &tall}) {
    const ConditionReport truth = condition_svd(*A, "A");
    for (const double scale : {1e-12, 1e-8, 1e-4, 1.0, 1e6, 1e12}) {
      const ConditionReport r = condition_fast(*A * scale, "A");
      SCOPED_TRACE(format_report(r) + " at scale " + std::to_string(scale) + " | " + r.note);
      EXPECT_EQ(r.method, A == &square ? "dense-lu-lanczos" : "dense-qr-lanczos");  // no fallback needed
      EXPECT_EQ(r.status, Status::kExact);
      EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-9);
      EXPECT_NEAR(r.sigma_max / (scale * truth.sigma_max), 1.0, 1e-9);
      EXPECT_NEAR(spectral_norm(*A * scale) / (scale * truth.sigma_max), 1.0, 1e-9);
    }
  }
}

// Wilkinson's growth matrix (1 on the diagonal and in the last column, −1 below the diagonal):
// partial pivoting grows the last column to 2^(n−1), the solves lose their backward stability,
// and κ came out 28.51 for 26.80 (n = 60), exact. σ_min of the solves then lies below its own Ritz
// vector's ‖A v‖ (lu_lanczos.h, "The one check"), and the SVD answers.
TEST(ConditionFast, WilkinsonsGrowthMatrixIsCaughtByTheRitzVectorCheck) {
  for (const Index n : {60, 100}) {
    Mat W = Mat::Identity(n, n);
    W.triangularView<Eigen::StrictlyLower>().setConstant(-1.0);
    W.col(n - 1).setOnes();
    const ConditionReport r = condition_fast(W, "W"), truth = condition_svd(W, "W");
    SCOPED_TRACE(format_report(r) + " | " + r.note);
    EXPECT_EQ(r.status, Status::kExact);
    EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-12);
    EXPECT_EQ(r.method, "dense-svd");
    EXPECT_NE(r.note.find("below its Ritz vector's ||A v||"), std::string::npos);
  }
}

// Kahan's matrix (n = 80, θ = 1.2: diag(1, s, …, s^(n−1)) times the unit upper triangle with −c
// above the diagonal): the triangular solves are so inaccurate that Spectra returned λ = 8.5e72
// for (AᵀA)⁻¹, whose largest eigenvalue is 3.2e25, with status Successful; the report said
// singular with κ ≥ 5.6e13, above the true κ = 4.65e13 (σ_min = 1.76e-13 is above the noise floor
// 1.46e-13). The check sends it to the SVD.
TEST(ConditionFast, KahansMatrixIsNotCalledSingularAboveItsTrueKappa) {
  const Index n = 80;
  const double s = std::sin(1.2), c = std::cos(1.2);
  Mat K = Mat::Zero(n, n);
  for (Index i = 0; i < n; ++i) {
    K(i, i) = std::pow(s, static_cast<double>(i));
    for (Index j = i + 1; j < n; ++j) K(i, j) = -c * std::pow(s, static_cast<double>(i));
  }
  const ConditionReport r = condition_fast(K, "K"), truth = condition_svd(K, "K");
  SCOPED_TRACE(format_report(r) + " | " + r.note + " || " + format_report(truth));
  ASSERT_EQ(truth.status, Status::kExact);
  EXPECT_EQ(r.status, Status::kExact);
  EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-9);
}

// A ten-fold bottom cluster (90 values 1, 10 values 1e-5): σ_min came out 9.99999908e-6, below
// every value of the cluster (κ off by 9e-8, documented 1e-9). Caught by the same check.
TEST(ConditionFast, ATenFoldBottomClusterKeepsKappaToItsStatedAccuracy) {
  Vec sv = Vec::Ones(100);
  sv.tail(10).setConstant(1e-5);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Mat A = with_singular_values(sv, 100, 100, seed);
    const ConditionReport r = condition_fast(A, "A"), truth = condition_svd(A, "A");
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + format_report(r) + " | " + r.note);
    EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-9);
  }
}

// From its own start (test::spectra_start_adversary) Spectra returned a Ritz value above AᵀA's
// spectrum, status Successful: condition_fast said σ_max 2.0396 (κ 204, 20 040, 2.04e6), exact,
// for a true 2. Its Ritz vector shows it (‖A v‖ ≤ σ_max, lu_lanczos.h "The σ_max check"), and a second start finds σ_max.
TEST(ConditionFast, AStartVectorThatIsASingularVectorDoesNotInflateSigmaMax) {
  for (double kmin : {1e2, 1e4, 1e6}) {
    const Mat A = test::spectra_start_adversary(kmin);
    const ConditionReport r = condition_fast(A, "A"), truth = condition_svd(A, "A");
    SCOPED_TRACE("kmin " + std::to_string(kmin) + ": " + format_report(r) + " | " + r.note);
    EXPECT_EQ(r.status, Status::kExact);
    EXPECT_NEAR(r.sigma_max, truth.sigma_max, 1e-9 * truth.sigma_max);
    EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-9);
    EXPECT_NEAR(spectral_norm(A), truth.sigma_max, 1e-9 * truth.sigma_max);
  }
}

TEST(CheckLapack, NonzeroInfoThrowsNamingTheRoutineAndTheValue) {
  EXPECT_NO_THROW(check_lapack("LAPACKE_dgetrs", 0));
  try {
    check_lapack("LAPACKE_dgetrs", -3);
    ADD_FAILURE() << "info = -3 accepted";
  } catch (const LapackError& e) {
    EXPECT_STREQ(e.what(), "LAPACKE_dgetrs failed: info = -3");
    EXPECT_EQ(e.routine(), "LAPACKE_dgetrs");
    EXPECT_EQ(e.info(), -3);
  }
  // A positive info is a failure too, unless the caller handles it as an outcome (dgetrf above).
  EXPECT_THROW(check_lapack("LAPACKE_dgesdd", 2), LapackError);
  EXPECT_THROW(check_lapack("LAPACKE_dgesdd", 2), std::runtime_error);
}

TEST(ConditionBlockdiag, EqualsTheSvdOfTheAssembledMatrix) {
  SCOPED_TRACE("seed=3");
  std::mt19937_64 rng(3);
  std::vector<Mat> blocks = {test::gaussian(5, 5, 1.0, rng), test::gaussian(5, 5, 0.1, rng), test::gaussian(5, 5, 3.0, rng)};
  Mat D = Mat::Zero(15, 15);
  for (int k = 0; k < 3; ++k) D.block(5 * k, 5 * k, 5, 5) = blocks[k];
  const ConditionReport a = condition_blockdiag(blocks, "D");
  const ConditionReport b = condition_svd(D, "D");
  EXPECT_NEAR(a.kappa / b.kappa, 1.0, 1e-12);
  EXPECT_EQ(a.rank, b.rank);
}

TEST(ConditionInputs, NaNIsRejected) {
  Mat A = Mat::Identity(60, 60);
  A(3, 4) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(condition_fast(A, "A"), std::invalid_argument);
  EXPECT_THROW(condition_svd(A, "A"), std::invalid_argument);
}

}  // namespace
}  // namespace jacond
