// The mixed-precision route (analysis/spectral/mixed_lu.h): an fp32 LU refined to fp64 gives the
// fp64 route's κ within the header's Bound 1, on matrices of prescribed κ and on the matrix-free
// K_sa; it fails honestly (not-converged, never a wrong κ) where κ·u₃₂ is too large for the
// refinement, and block_reports then falls back to the fp64 LU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>

#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/mixed_lu.h"
#include "support/constructed_spectrum.h"
#include "support/random_block.h"

namespace jacond {

void PrintTo(Status s, std::ostream* os) { *os << to_string(s); }

namespace {

using test::geometric;
using test::with_singular_values;

constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;
constexpr double kFp32UnitRoundoff = std::numeric_limits<float>::epsilon() / 2;
// Bound 2 of mixed_lu.h in the form the tests hold the route to: κ ≤ 1e6 (κ·u₃₂ ≤ 0.06) must
// converge; above it the route may converge or fail, but never give a κ outside Bound 1.
constexpr double kMustConverge = 0.06;

// Bound 1 of mixed_lu.h, as a relative error of κ: σ_min within √N·u·σ_max of the truth, so κ
// within √N·u·κ (relative), times 8 for the truth's own rounding (the fp64 route, or the
// construction U diag(s) Vᵀ) and Lanczos' 1e-13 on 1/σ².
double kappa_tolerance(Index n, double kappa) {
  return 8 * std::sqrt(static_cast<double>(n)) * kUnitRoundoff * kappa + 1e-12;
}

ConditionReport mixed_on_dense(const Mat& A, const std::string& name = "A") {
  const DenseMatrixOp op(A);
  return condition_mixed(A.cast<float>(), linear_map(op), name);
}

class MixedLuAcrossKappa : public ::testing::TestWithParam<double> {};

TEST_P(MixedLuAcrossKappa, GivesTheConstructedKappaWithinBound1N200) {
  const double kappa = GetParam();
  SCOPED_TRACE("kappa=" + std::to_string(kappa) + " seed=21");
  const Index n = 200;
  const Mat A = with_singular_values(geometric(n, kappa), n, n, 21);
  const ConditionReport r = mixed_on_dense(A);
  EXPECT_EQ(r.status, Status::kExact);
  EXPECT_EQ(r.method, "dense-lu32-refined-lanczos");
  EXPECT_EQ(r.rank, n);
  EXPECT_NEAR(r.sigma_max, 1.0, 1e-12);
  EXPECT_LT(std::abs(r.kappa - kappa) / kappa, kappa_tolerance(n, kappa));
  // And against the fp64 route on the same matrix (both within Bound 1 of the truth).
  const ConditionReport fast = condition_fast(A, "A");
  EXPECT_LT(std::abs(r.kappa - fast.kappa) / fast.kappa, kappa_tolerance(n, kappa));
  EXPECT_NE(r.note.find("fp32 LU refined to fp64"), std::string::npos) << r.note;
}

// 1e8: κ·u₃₂ ≈ 6, where classical refinement diverges and GMRES-IR still converges.
INSTANTIATE_TEST_SUITE_P(Kappa, MixedLuAcrossKappa, ::testing::Values(1e2, 1e4, 1e6, 1e8));

// The mixed route shares lu_lanczos.h's power-of-two scaling: at scale 1e-8 (σ_max² = 1e-16,
// under Spectra's absolute acceptance floor) and 1e12 (σ_min⁻² = 1e-16) it gives the same κ.
TEST(MixedLu, TinyAndHugeMatricesKeepTheirKappaN120) {
  SCOPED_TRACE("seed=23");
  const Mat A = with_singular_values(geometric(120, 1e4), 120, 120, 23);
  for (const double scale : {1e-8, 1e12}) {
    const ConditionReport r = mixed_on_dense(A * scale);
    SCOPED_TRACE(format_report(r) + " at scale " + std::to_string(scale) + " | " + r.note);
    EXPECT_EQ(r.status, Status::kExact);
    EXPECT_EQ(r.method, "dense-lu32-refined-lanczos");
    EXPECT_LT(std::abs(r.kappa - 1e4) / 1e4, kappa_tolerance(120, 1e4));
    EXPECT_NEAR(r.sigma_max / scale, 1.0, 1e-9);
  }
}

// The refined solve itself: (AᵀA)⁻¹ x through the fp32 factor equals the fp64 solve to κ²·√N·u
// (two solves), and each solve's backward error meets the stopping test.
TEST(MixedLuBackend, InverseGramMatchesTheFp64SolveAndMeetsItsBackwardErrorTestN150) {
  SCOPED_TRACE("seed=22");
  const Index n = 150;
  const double kappa = 1e3;
  const Mat A = with_singular_values(geometric(n, kappa), n, n, 22);
  const DenseMatrixOp op(A);
  const LinearMap map = linear_map(op);
  CpuLu32 lu(A.cast<float>());
  MixedLuBackend<CpuLu32> backend(lu, map);
  ASSERT_EQ(backend.factor(1.0), FactorOutcome::kFactored);  // σ_max = 1 by construction
  std::mt19937_64 rng(23);
  const Vec x = test::gaussian(n, 1, 1.0, rng);
  Vec y(n);
  backend.inverse_gram(x.data(), y.data());
  const Eigen::PartialPivLU<Mat> lu64(A);
  const Vec want = lu64.solve(lu64.transpose().solve(x));  // A⁻¹ A⁻ᵀ x
  EXPECT_LT((y - want).norm() / want.norm(), 8 * std::sqrt(static_cast<double>(n)) * kUnitRoundoff * kappa * kappa);
  const RefinementStats& s = backend.stats();
  EXPECT_EQ(s.solves, 2);
  EXPECT_LE(s.max_backward_error, std::sqrt(static_cast<double>(n)) * kUnitRoundoff);
  // κ·u₃₂ = 6e-5: GMRES gains ≥ 4 digits per fp32 solve, so one or two refinement steps of a few
  // GMRES iterations each.
  EXPECT_GE(s.max_steps, 1);
  EXPECT_LE(s.max_steps, 2);
  EXPECT_GE(s.max_iterations, 2);
  EXPECT_LE(s.max_iterations, 12);
}

// κ·u₃₂ ≫ 1: the fp32 LU cannot drive the residual down; the route says so, with NaN κ.
TEST(MixedLu, FailsHonestlyWhenKappaTimesFp32RoundoffIsFarAboveOneN120) {
  SCOPED_TRACE("seed=24 kappa=1e10");
  const Mat A = with_singular_values(geometric(120, 1e10), 120, 120, 24);
  const ConditionReport r = mixed_on_dense(A);
  EXPECT_EQ(r.status, Status::kNotConverged);
  EXPECT_TRUE(std::isnan(r.kappa));
  EXPECT_NE(r.note.find("fp32 LU refinement failed"), std::string::npos) << r.note;
}

// A nonsingular fp64 matrix whose fp32 rounding is exactly singular: two rows 1 and 1 + 1e-10
// apart round to the same floats. The route reports the zero pivot; it does not guess.
TEST(MixedLu, ReportsAnExactlyZeroFp32PivotN60) {
  Mat A = Mat::Identity(60, 60);
  A.block(0, 0, 2, 2) << 1.0, 1.0, 1.0, 1.0 + 1e-10;
  const ConditionReport r = mixed_on_dense(A);
  EXPECT_EQ(r.status, Status::kNotConverged);
  EXPECT_NE(r.note.find("pivot of the fp32 LU is exactly zero"), std::string::npos) << r.note;
}

// The intended use: the fp32 matrix is K_sa assembled, the fp64 truth its matrix-free operator.
TEST(MixedLu, MatrixFreeAttentionJacobianGivesTheFp64RoutesKappaN8D16H2) {
  SCOPED_TRACE("seed=25/26");
  const BlockWeights w = test::random_block(16, 2, 64, 25);
  const BlockForward f = block_forward(w, test::random_tokens(8, 16, 26), SkipMode::kNone);
  // K_sa and B_sa exact; E_sa is singular here (σ_min under the noise floor), and both routes say so.
  for (const auto part : {AttentionPart::kFull, AttentionPart::kB, AttentionPart::kE}) {
    const Mat K = attention_jacobian(w, f.attn, part);
    const AttentionJacobianOp op(w, f.attn, part);
    const ConditionReport r = condition_mixed(K.cast<float>(), linear_map(op), "K_sa");
    const ConditionReport fast = condition_fast(K, "K_sa");
    SCOPED_TRACE("part " + std::to_string(static_cast<int>(part)) + ", kappa " + std::to_string(fast.kappa));
    if (part == AttentionPart::kE) {
      // Singular by construction. Whether the fp32 route sees it (an overflowing solve: singular) or
      // its refinement fails first (not-converged, the caller's cue to fall back) depends on the
      // fp32 LU's rounding, which differs between OpenBLAS's kernels for different CPUs (both were
      // seen). Either way it never reports a κ, and the route a user calls falls back to fp64: singular.
      ASSERT_EQ(fast.status, Status::kSingular);
      EXPECT_TRUE(r.status == Status::kSingular || r.status == Status::kNotConverged) << r.note;
      if (r.status == Status::kNotConverged) {
        EXPECT_NE(r.note.find("fp32 LU"), std::string::npos) << r.note;
      }
      const ConditionReport routed = condition_dense(K, "E_sa", KappaRoute::kMixed);
      EXPECT_EQ(routed.status, Status::kSingular) << routed.note;
      continue;
    }
    ASSERT_EQ(fast.status, Status::kExact);
    EXPECT_LT(std::abs(r.sigma_max - fast.sigma_max) / fast.sigma_max, 1e-12);
    if (fast.kappa * kFp32UnitRoundoff < kMustConverge) {
      EXPECT_EQ(r.status, Status::kExact) << r.note;
    }
    if (r.status == Status::kExact) {
      EXPECT_LT(std::abs(r.kappa - fast.kappa) / fast.kappa, kappa_tolerance(K.rows(), fast.kappa));
    } else {
      EXPECT_NE(r.note.find("fp32 LU refinement failed"), std::string::npos) << r.note;
    }
  }
}

TEST(MixedLu, BelowOrder48TheSvdOfTheOperatorsMatrix) {
  const Mat A = with_singular_values(geometric(20, 50), 20, 20, 27);
  const ConditionReport r = mixed_on_dense(A);
  EXPECT_EQ(r.method, "dense-svd");
  EXPECT_NEAR(r.kappa, 50, 50 * 1e-12);
}

TEST(MixedLu, RejectsAMismatchedOrNonFiniteMatrix) {
  const Mat A = Mat::Identity(60, 60);
  const DenseMatrixOp op(A);
  EXPECT_THROW(condition_mixed(MatF::Identity(59, 59), linear_map(op), "A"), std::invalid_argument);
  MatF bad = MatF::Identity(60, 60);
  bad(3, 4) = std::numeric_limits<float>::infinity();
  EXPECT_THROW(condition_mixed(bad, linear_map(op), "A"), std::invalid_argument);
  const Mat wide(4, 6);
  EXPECT_THROW(linear_map(DenseMatrixOp(wide)), std::invalid_argument);
}

// condition_dense's kMixed falls back to the fp64 LU when the refinement fails, and says so.
TEST(MixedRoute, ConditionDenseFallsBackToTheFp64RouteWhenRefinementFailsN100) {
  SCOPED_TRACE("seed=28 kappa=1e10");
  const Mat A = with_singular_values(geometric(100, 1e10), 100, 100, 28);
  const ConditionReport r = condition_dense(A, "A", KappaRoute::kMixed);
  EXPECT_EQ(r.method, "dense-lu-lanczos");
  EXPECT_EQ(r.status, Status::kExact);
  EXPECT_NE(r.note.find("fp32 LU refinement failed"), std::string::npos) << r.note;
  EXPECT_NE(r.note.find("fp64 LU route used"), std::string::npos) << r.note;
  EXPECT_LT(std::abs(r.kappa - 1e10) / 1e10, 1e-4);  // √N·u·κ = 1e-5: the fp64 route's own limit
}

// block_reports with kMixed: every nd × nd report as kFast's, by the mixed method; with the
// residual gone the structurally singular full-space K_sab falls back, and its ln-complement
// (not square) takes the fp64 QR route.
TEST(MixedRoute, BlockReportsMatchTheFastRouteN8D12H3) {
  const BlockWeights w = test::random_block(12, 3, 48, 29);
  const Mat X = test::random_tokens(8, 12, 30);
  for (const SkipMode skip : {SkipMode::kFull, SkipMode::kNone}) {
    SCOPED_TRACE(skip == SkipMode::kFull ? "skip=full" : "skip=none");
    BlockReportOptions fast_opt, mixed_opt;
    fast_opt.route = KappaRoute::kFast;
    mixed_opt.route = KappaRoute::kMixed;
    const auto fast = block_reports(w, X, skip, fast_opt);
    const auto mixed = block_reports(w, X, skip, mixed_opt);
    ASSERT_EQ(fast.size(), mixed.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      const ConditionReport &a = fast[i], &b = mixed[i];
      SCOPED_TRACE(a.matrix + " on " + a.space + " head " + std::to_string(a.head));
      ASSERT_EQ(a.matrix, b.matrix);
      ASSERT_EQ(a.space, b.space);
      EXPECT_EQ(a.status, b.status) << b.note;
      const bool nd_square = a.rows == 96 && a.cols == 96 && (a.matrix == "K_sa" || a.matrix == "B_sa" ||
                                                              a.matrix == "E_sa" || a.matrix == "K_sab");
      const bool converges = a.status == Status::kExact && a.kappa * kFp32UnitRoundoff < kMustConverge;
      if (nd_square && converges) {
        EXPECT_EQ(b.method, "dense-lu32-refined-lanczos") << b.note;
        EXPECT_LT(std::abs(a.kappa - b.kappa) / a.kappa, kappa_tolerance(a.rows, a.kappa));
      } else if (nd_square && b.method == "dense-lu32-refined-lanczos") {  // converged anyway: within Bound 1
        EXPECT_LT(std::abs(a.kappa - b.kappa) / a.kappa, kappa_tolerance(a.rows, a.kappa));
      } else if (nd_square) {  // the fp64 route: κ·u₃₂ too large, or singular (skipless K_sab on the full space)
        EXPECT_NE(b.note.find("fp64 LU route used"), std::string::npos) << b.note;
      } else {
        EXPECT_EQ(a.method, b.method);
        EXPECT_EQ(a.kappa, b.kappa);
      }
    }
  }
}

// A back end's failure (a CUDA call) propagates out of lu_lanczos_extremes; a numerical outcome
// (a failed refinement) becomes kNotConverged. Before DeviceError, a CudaError inside a Lanczos
// product was caught as "did not converge" and the caller answered with an SVD.
struct ThrowingBackend {
  bool device_failure;
  Index order() const { return 60; }
  void gram(const double* x, double* y) const { std::copy(x, x + 60, y); }
  FactorOutcome factor(double) const { return FactorOutcome::kFactored; }
  void inverse_gram(const double*, double*) const {
    if (device_failure) throw DeviceError("cusolverDnXgetrs failed at dense_cuda.cpp:1: an illegal address");
    throw RefinementFailed("no convergence");
  }
};

TEST(LuLanczos, DeviceErrorsPropagateAndRefinementFailuresAreOutcomes) {
  ThrowingBackend device{true}, refinement{false};
  EXPECT_THROW(lu_lanczos_extremes(device), DeviceError);
  EXPECT_EQ(lu_lanczos_extremes(refinement).outcome, LuLanczosExtremes::Outcome::kNotConverged);
}

TEST(MixedRoute, ParsesAndPrintsMixed) {
  EXPECT_EQ(parse_kappa_route("mixed"), KappaRoute::kMixed);
  EXPECT_EQ(to_string(KappaRoute::kMixed), "mixed");
}

}  // namespace
}  // namespace jacond
