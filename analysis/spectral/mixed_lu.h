// κ of a square A from an fp32 LU, accurate to fp64: condition_fast's algorithm
// (analysis/spectral/lu_lanczos.h) with every solve refined against the fp64 operator A.
//
// Why. The LU is the whole cost of the exact route and its memory is the matrix: 8N² bytes in
// fp64, 4N² in fp32. ViT-B's K_sa (N = 151 296) is 183 GB in fp64 and fits no GPU; its fp32 LU is
// 92 GB and fits one H200 (issue #11). The matrix-free operators (analysis/operators) give A·x and
// Aᵀ·x in fp64 for O(n²d + nd²) flops without forming A, so fp64 accuracy needs no fp64 matrix:
// the fp32 LU only has to be a good enough preconditioner for iterative refinement.
//
// Math: iterative refinement with GMRES on the correction equation, preconditioned by the fp32
// LU: GMRES-IR (Carson & Higham, SISC 2017 "A new analysis of iterative refinement…"; SISC 2018
// "…in three precisions"). To solve A x = b (or Aᵀ x = b) with Â = L̂Û the fp32 LU of fl₃₂(A):
//   x = 0; repeat (one refinement step per cycle):
//     r = b − A x                                 (fp64; A the fp64 operator)
//     stop when ‖r‖₂ ≤ √N · u · σ_max · ‖x‖₂      (u = 2⁻⁵³; LAPACK dsgesv's test, in 2-norms: σ_max = ‖A‖₂
//                                                  is known from the first Lanczos run)
//     d ≈ A⁻¹ r by flexible GMRES in fp64 with the right preconditioner Â⁻¹ applied in fp32
//       (z = Â⁻¹(v/s)·s, s = ‖v‖_∞): at most kGmresBasis iterations, stopping when its residual
//       estimate has fallen by kGmresReduction; x ← x + d
// Each GMRES iteration costs what one step of classical refinement does (one fp32 solve, one fp64
// product). Classical refinement (x ← x + Â⁻¹r) contracts the error by ρ ≈ ‖I − Â⁻¹A‖ per step and
// diverges at ρ ≥ 1; measured here, the fp32 LU's backward error is ~60·u₃₂ at N = 6400 (u₃₂ = 2⁻²⁴),
// so ρ ≥ 1 already at κ ≈ 3e5, below the κ ≈ 1e6 of ViT-B's K_sa under `ours`. GMRES on Â⁻¹A, whose
// spectrum clusters about 1 while Â still carries most of A, converges far past that (Carson & Higham:
// to κ of order u⁻¹ for these precisions; no guarantee that GMRES is quick, hence the caps).
//
// Bound 1 (what a converged solve means; a posteriori, assumes nothing about Â). x solves
// (A + ΔA) x = b exactly with ΔA = r xᵀ/‖x‖², ‖ΔA‖₂ = ‖r‖/‖x‖ ≤ √N·u·σ_max (Rigal & Gaches 1967).
// So every product of (AᵀA)⁻¹ is that of a matrix within √N·u·σ_max of A, and the Lanczos on it
// finds σ_min with absolute error O(√N·u·σ_max) (Weyl): the contract of the fp64 LU route
// (docs/design.md §4: O(eps·σ_max) from a backward-stable solve), with √N in place of the LU's
// growth factor. At ViT-B (N = 151 296) that is 4.3e-14·σ_max: κ = 1e6 keeps ~7 digits.
//
// Bound 2 (when it converges; this is the one assumption, and only speed rests on it): while the
// fp32 LU still preconditions A, i.e. κ(A)·u₃₂ is not far above 1. When it does not, the true
// residual stops falling: a refinement step that does not halve ‖r‖, or kRefineMaxSteps steps, ends
// the solve with RefinementFailed, never with a wrong x. The caller then reports status
// not-converged and falls back to the fp64 LU (block_report.cpp).
//
// Why not LAPACK's dsgesv or cuSOLVER's IRS solvers (which also have GMRES-IR): both factorise on
// every call and take the fp64 matrix itself for the residual; here one factorisation serves ~50
// solves and the residual comes from an operator that never forms A. Why not Eigen's (unsupported)
// GMRES: it preconditions on the left, so its stopping test is on Â⁻¹r, not on the true residual
// that Bound 1 needs, and it takes a preconditioner in the working precision.
//
// Factor concept (CPU: CpuLu32 below, LAPACKE sgetrf/sgetrs; CUDA: analysis/cuda/dense_cuda.cpp):
//   Index order() const;                    N
//   FactorOutcome factor();                 fp32 LU with partial pivoting; kExactlySingular when a
//                                           pivot of fl₃₂(A) is exactly zero
//   void solve(float* v, bool transposed);  v ← Â⁻¹ v or Â⁻ᵀ v (host vector of N floats)
// Guarded by tests/analysis/spectral/test_mixed_lu.cpp (against condition_fast on matrices of
// prescribed κ up to 1e6, the failure at κ·u₃₂ ≫ 1, and the matrix-free K_sa) on the CPU, and by
// tests/analysis/cuda/test_dense_cuda.cpp (the CUDA factor against the CPU one) on a GPU.
#pragma once

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/core/clock.h"
#include "analysis/core/types.h"
#include "analysis/operators/operators.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/lu_lanczos.h"

namespace jacond {

/// A square fp64 operator behind a type-erased interface (the device API takes one): the matrix
/// the mixed route's residuals and σ_max are computed against. Built by linear_map(op).
struct LinearMap {
  Index order = 0;
  std::function<void(const double*, double*)> apply;            // y = A x
  std::function<void(const double*, double*)> apply_transpose;  // y = Aᵀ x

  // The operator concept of analysis/operators/operators.h (operator_to_dense takes it).
  Index rows() const { return order; }
  Index cols() const { return order; }
  void perform_op(const double* x, double* y) const { apply(x, y); }
};

/// A view of any operator with rows(), perform_op and perform_op_transpose (analysis/operators):
/// holds a reference, keep `op` alive.
template <typename Op>
LinearMap linear_map(const Op& op) {
  if (op.rows() != op.cols()) throw std::invalid_argument("linear_map: the mixed route needs a square operator");
  return {op.rows(), [&op](const double* x, double* y) { op.perform_op(x, y); },
          [&op](const double* x, double* y) { op.perform_op_transpose(x, y); }};
}

/// Thrown by a refined solve that does not reach Bound 1's test (see the header comment).
class RefinementFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What the refined solves of one κ took.
struct RefinementStats {
  Index solves = 0;
  Index steps = 0, max_steps = 0;                  // refinement steps (true fp64 residuals)
  Index iterations = 0, max_iterations = 0;        // GMRES iterations = fp32 solves, per solve
  double max_backward_error = 0;  // max over solves of ‖b − A x‖₂ / (σ_max ‖x‖₂)
  std::string failure;            // why a solve failed; empty when none did
};

inline constexpr Index kRefineMaxSteps = 10;     // refinement steps per solve
inline constexpr Index kGmresBasis = 40;         // GMRES iterations per refinement step
inline constexpr double kGmresReduction = 1e-12; // GMRES stops when its residual estimate fell this much
inline constexpr Index kMixedMinOrder = kFastMinSize;  // below it: the SVD, as condition_fast

/// lu_lanczos_extremes' backend: gram() by the fp64 operator, inverse_gram() by two refined solves
/// (Aᵀ z = x, then A y = z) through the fp32 factor.
template <typename Factor32>
class MixedLuBackend {
 public:
  MixedLuBackend(Factor32& lu, const LinearMap& A)
      : lu_(lu), A_(A), t_(A.order), r_(A.order), ax_(A.order), V_(A.order, kGmresBasis + 1), Z_(A.order, kGmresBasis),
        H_(kGmresBasis + 1, kGmresBasis), rf_(A.order) {
    if (lu.order() != A.order) throw std::invalid_argument("MixedLuBackend: the factor and the operator differ in order");
  }
  Index order() const { return A_.order; }
  void gram(const double* x, double* y) {
    A_.apply(x, t_.data());
    A_.apply_transpose(t_.data(), y);
  }
  FactorOutcome factor(double sigma_max) {
    sigma_max_ = sigma_max;
    return lu_.factor();
  }
  void inverse_gram(const double* x, double* y) {
    if (!Eigen::Map<const Vec>(x, order()).allFinite()) throw NonFiniteSolve();
    solve(x, t_.data(), true);
    solve(t_.data(), y, false);
  }
  const RefinementStats& stats() const { return stats_; }

 private:
  // x = A⁻¹ b (or A⁻ᵀ b): refinement steps, each a GMRES solve of the correction equation, until
  // Bound 1's test holds; RefinementFailed otherwise.
  void solve(const double* b, double* x, bool transposed) {
    const Index n = order();
    const auto& apply = transposed ? A_.apply_transpose : A_.apply;
    const Eigen::Map<const Vec> bv(b, n);
    Eigen::Map<Vec> xv(x, n);
    xv.setZero();
    r_ = bv;
    const double target = std::sqrt(static_cast<double>(n)) * std::numeric_limits<double>::epsilon() / 2 * sigma_max_;
    double previous = std::numeric_limits<double>::infinity();
    Index step = 0, iterations = 0;
    for (double residual = r_.norm(); residual > target * xv.norm(); residual = r_.norm()) {
      if (!(residual <= previous / 2))
        fail("refinement step " + std::to_string(step) + " did not halve the residual", residual, xv.norm());
      if (++step > kRefineMaxSteps) fail("no convergence in " + std::to_string(kRefineMaxSteps) + " steps", residual, xv.norm());
      previous = residual;
      iterations += gmres_correction(apply, transposed, residual, xv);
      if (!xv.allFinite()) fail("the correction overflowed", residual, 0);
      apply(x, ax_.data());
      r_ = bv - ax_;
    }
    ++stats_.solves;
    stats_.steps += step;
    stats_.max_steps = std::max(stats_.max_steps, step);
    stats_.iterations += iterations;
    stats_.max_iterations = std::max(stats_.max_iterations, iterations);
    const double x_norm = xv.norm();
    if (x_norm > 0) stats_.max_backward_error = std::max(stats_.max_backward_error, r_.norm() / (sigma_max_ * x_norm));
  }

  // x += d with A d ≈ r_ (‖r_‖ = beta) by flexible GMRES (Saad 1993: the preconditioned vectors
  // z_j = Â⁻¹ v_j are kept, d = Z y), Arnoldi by modified Gram–Schmidt, the least-squares problem
  // by Givens rotations. Returns the iterations (fp32 solves) taken.
  template <typename Apply>
  Index gmres_correction(const Apply& apply, bool transposed, double beta, Eigen::Map<Vec>& x) {
    V_.col(0) = r_ / beta;
    Vec g = Vec::Zero(kGmresBasis + 1), cs(kGmresBasis), sn(kGmresBasis);
    g(0) = beta;
    Index k = 0;
    while (k < kGmresBasis) {
      precondition(V_.col(k), Z_.col(k), transposed);
      apply(Z_.col(k).data(), ax_.data());
      for (Index i = 0; i <= k; ++i) {
        H_(i, k) = V_.col(i).dot(ax_);
        ax_ -= H_(i, k) * V_.col(i);
      }
      H_(k + 1, k) = ax_.norm();
      for (Index i = 0; i < k; ++i) {  // the earlier rotations, on the new column
        const double h = cs(i) * H_(i, k) + sn(i) * H_(i + 1, k);
        H_(i + 1, k) = -sn(i) * H_(i, k) + cs(i) * H_(i + 1, k);
        H_(i, k) = h;
      }
      const double rho = std::hypot(H_(k, k), H_(k + 1, k));
      const double next = H_(k + 1, k);
      cs(k) = rho > 0 ? H_(k, k) / rho : 1.0;
      sn(k) = rho > 0 ? H_(k + 1, k) / rho : 0.0;
      H_(k, k) = rho;
      H_(k + 1, k) = 0;
      g(k + 1) = -sn(k) * g(k);
      g(k) = cs(k) * g(k);
      ++k;
      if (next == 0 || !(std::abs(g(k)) > kGmresReduction * beta)) break;  // happy breakdown or reduced
      V_.col(k) = ax_ / next;
    }
    const Vec y = H_.topLeftCorner(k, k).template triangularView<Eigen::Upper>().solve(g.head(k));
    x.noalias() += Z_.leftCols(k) * y;
    return k;
  }

  // z = Â⁻¹ v (or Â⁻ᵀ v) in fp32, v scaled to ‖v‖_∞ = 1 first (the fp32 range) and z scaled back.
  template <typename In, typename Out>
  void precondition(const In& v, Out z, bool transposed) {
    const double scale = v.cwiseAbs().maxCoeff();
    if (scale == 0.0) {
      z.setZero();
      return;
    }
    rf_ = (v / scale).template cast<float>();
    lu_.solve(rf_.data(), transposed);
    z = scale * rf_.template cast<double>();
  }

  [[noreturn]] void fail(const std::string& why, double residual, double x_norm) {
    std::ostringstream os;
    os.precision(3);
    os << why << " (backward error " << (x_norm > 0 ? residual / (sigma_max_ * x_norm) : residual / sigma_max_)
       << "; κ·u32 is too large for the fp32 LU)";
    stats_.failure = os.str();
    throw RefinementFailed(stats_.failure);
  }

  Factor32& lu_;
  const LinearMap& A_;
  double sigma_max_ = 0;
  Vec t_, r_, ax_;
  Mat V_, Z_, H_;  // GMRES: Arnoldi basis, preconditioned basis, Hessenberg (rotated to R)
  VecF rf_;
  RefinementStats stats_;
};

/// One line for a report's note: "fp32 LU refined to fp64 (GMRES-IR): 1.5 steps, 6.2 fp32 solves
/// per solve (max 2, 9), backward error <= 3.1e-15".
std::string describe(const RefinementStats& s);

/// κ of the operator A with the factor of its fp32 rounding (the algorithm, for every device;
/// below order kMixedMinOrder the SVD of A's matrix, as condition_fast).
/// Status exact or singular (finish_extremes_report), or not-converged with a note saying why
/// (the refinement failed: Bound 2 does not hold; or a pivot of fl₃₂(A) is exactly zero; or
/// Lanczos did not converge); κ is then NaN and the caller falls back to the fp64 route.
template <typename Factor32>
ConditionReport condition_mixed_with(Factor32& lu, const LinearMap& A, const std::string& matrix, const std::string& method) {
  const auto t0 = std::chrono::steady_clock::now();
  if (A.order < kMixedMinOrder) {  // Lanczos needs room; the SVD of the operator's matrix is cheaper
    return condition_svd(operator_to_dense(A), matrix);
  }
  ConditionReport r;
  r.matrix = matrix;
  r.rows = r.cols = A.order;
  r.method = method;
  MixedLuBackend<Factor32> backend(lu, A);
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  r.products = e.products;
  r.sigma_max = e.sigma_max;
  std::string unsupported;  // lu_lanczos.h's check, with A v by the fp64 operator
  if (e.outcome == LuLanczosExtremes::Outcome::kOk) {
    Vec Av(A.order);
    A.apply(e.v_min.data(), Av.data());
    unsupported = unsupported_sigma_min(e, Av.norm(), noise_floor(A.order, A.order, e.sigma_max));
  }
  if (e.outcome == LuLanczosExtremes::Outcome::kOk && unsupported.empty()) {
    r.sigma_min = e.sigma_min;
    finish_extremes_report(r);
    r.note += std::string(r.note.empty() ? "" : "; ") + describe(backend.stats());
  } else {
    const std::string& failure = backend.stats().failure;
    finish_not_converged_report(r, !unsupported.empty() ? unsupported
                                   : e.outcome == LuLanczosExtremes::Outcome::kExactlySingular
                                       ? "a pivot of the fp32 LU is exactly zero"
                                   : !failure.empty() ? "fp32 LU refinement failed: " + failure
                                   : !e.why.empty()   ? e.why
                                                      : "lanczos did not converge");
  }
  r.seconds = seconds_since(t0);
  return r;
}

/// The checks every device's condition_mixed makes before it factorises: A32 square, of A's order
/// and finite (an fp64 entry beyond fp32's range became inf); std::invalid_argument naming
/// `matrix` otherwise.
void check_mixed_input(const MatF& A32, const LinearMap& A, const std::string& matrix);

/// The host's fp32 factor: LAPACKE sgetrf, sgetrs.
class CpuLu32 {
 public:
  explicit CpuLu32(MatF A);
  Index order() const { return lu_.rows(); }
  FactorOutcome factor();
  void solve(float* v, bool transposed) const;

 private:
  MatF lu_;
  std::vector<int> ipiv_;
};

/// The mixed route on the host: fp32 LU of A32 = fl₃₂(A) by LAPACKE, residuals by `A`. Method
/// "dense-lu32-refined-lanczos". Throws std::invalid_argument when A32 is not square, does not
/// match A's order, or holds NaN/inf (an fp64 entry beyond fp32's range becomes inf).
ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix);

}  // namespace jacond
