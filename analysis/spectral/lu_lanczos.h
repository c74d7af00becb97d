// The extremes of a dense square matrix A by one factorisation and two Lanczos runs: the algorithm
// of condition_fast (analysis/spectral/condition.h), written once for every device. A backend
// supplies the linear algebra; this file holds the math and the outcomes.
//
// Math. σ_max² is the top eigenvalue of AᵀA, σ_min⁻² the top eigenvalue of (AᵀA)⁻¹ = A⁻¹A⁻ᵀ,
// applied through a factorisation of A (LU with partial pivoting, or the R of a QR for a tall A):
// two triangular-pair solves per product, never AᵀA itself, so σ_min keeps the O(eps·κ) relative
// accuracy of a backward-stable solve rather than the O(eps·κ²) of forming AᵀA (docs/design.md §4).
// Both eigenvalues come from Spectra's symmetric Lanczos (SymEigsSolver, 24 vectors, tolerance
// 1e-13 relative): on (AᵀA)⁻¹ the top eigenvalue is separated from the rest by the ratio
// (σ_2/σ_1)², so it converges in tens of products even when A is ill-conditioned.
//
// Backend concept (CPU: LAPACKE in condition.cpp; CUDA: cuBLAS/cuSOLVER in analysis/cuda/):
//   Index order() const;                                  n, A is n × n
//   void gram(const double* x, double* y);                y = AᵀA x          (host vectors)
//   FactorOutcome factor(double sigma_max);               factorise A in place (after gram's use);
//                                                         σ_max for backends whose solves test a
//                                                         residual against ‖A‖₂ (mixed_lu.h)
//   void inverse_gram(const double* x, double* y);        y = (AᵀA)⁻¹ x; throws NonFiniteSolve
//                                                         when the result overflows
// Vectors are host vectors of length n: a product moves 2n doubles to and from a device, against
// the n² entries it reads there, so the Lanczos bookkeeping stays on the host for every backend.
//
// Outcomes: kExactlySingular (a pivot or diagonal entry is exactly zero: the caller answers with
// an SVD, which gives the rank), kNotConverged (Lanczos did not converge, or the solve overflowed:
// numerically singular or pathologically clustered; the caller falls back likewise), kOk.
// Guarded by the condition_fast tests (tests/analysis/spectral/test_condition.cpp) on the CPU and
// by tests/analysis/cuda/test_dense_cuda.cpp (CUDA against CPU on the same matrices) on a GPU.
#pragma once

#include <Spectra/SymEigsSolver.h>

#include <cmath>
#include <stdexcept>

#include "analysis/core/lapack.h"
#include "analysis/core/types.h"

namespace jacond {

/// Thrown by a backend's inverse_gram when (AᵀA)⁻¹ x overflows: A is numerically singular. A
/// numerical outcome, not a failure.
class NonFiniteSolve : public std::runtime_error {
 public:
  NonFiniteSolve() : std::runtime_error("(A^T A)^-1 x overflowed: A is numerically singular") {}
};

/// A back end's own failure (a CUDA call, analysis/cuda/dense_cuda.h): never an outcome of the
/// algorithm, so top_eigenvalue lets it through instead of reporting "did not converge".
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class FactorOutcome { kFactored, kExactlySingular };

struct LuLanczosExtremes {
  enum class Outcome { kOk, kExactlySingular, kNotConverged } outcome = Outcome::kNotConverged;
  double sigma_max = 0, sigma_min = 0;
  Index products = 0;  // applications of AᵀA and (AᵀA)⁻¹ together
};

namespace detail {

constexpr double kLuLanczosTol = 1e-13;

// Spectra's operator view of one of the backend's two products.
template <typename Backend, bool kInverse>
class BackendGramOp {
 public:
  using Scalar = double;
  explicit BackendGramOp(Backend& b) : b_(b) {}
  Index rows() const { return b_.order(); }
  Index cols() const { return b_.order(); }
  void perform_op(const double* x, double* y) const {
    if constexpr (kInverse) b_.inverse_gram(x, y);
    else b_.gram(x, y);
  }
 private:
  Backend& b_;
};

// Top eigenvalue of a symmetric positive semi-definite operator; false if Lanczos did not converge
// or overflowed (NonFiniteSolve, a failed refinement in mixed_lu.h, or Spectra's tridiagonal
// solver failing on non-finite Ritz values). A LapackError or a DeviceError is a failure and
// propagates.
template <typename Op>
bool top_eigenvalue(Op& op, double* value, Index* products) {
  Spectra::SymEigsSolver<Op> eigs(op, 1, std::min<Index>(op.rows(), 24));
  try {
    eigs.init();
    eigs.compute(Spectra::SortRule::LargestAlge, 500, kLuLanczosTol);
  } catch (const LapackError&) {
    throw;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::runtime_error&) {
    *products += eigs.num_operations();
    return false;
  }
  *products += eigs.num_operations();
  if (eigs.info() != Spectra::CompInfo::Successful) return false;
  *value = eigs.eigenvalues()(0);
  return std::isfinite(*value);
}

}  // namespace detail

/// σ_max by Lanczos on AᵀA, then the factorisation, then σ_min by Lanczos on (AᵀA)⁻¹.
template <typename Backend>
LuLanczosExtremes lu_lanczos_extremes(Backend& backend) {
  LuLanczosExtremes out;
  double lam_max = 0, lam_inv = 0;
  detail::BackendGramOp<Backend, false> gram(backend);
  if (!detail::top_eigenvalue(gram, &lam_max, &out.products)) return out;
  out.sigma_max = std::sqrt(std::max(lam_max, 0.0));
  if (backend.factor(out.sigma_max) == FactorOutcome::kExactlySingular) {
    out.outcome = LuLanczosExtremes::Outcome::kExactlySingular;
    return out;
  }
  detail::BackendGramOp<Backend, true> inverse(backend);
  if (!detail::top_eigenvalue(inverse, &lam_inv, &out.products) || !(lam_inv > 0)) return out;
  out.sigma_min = 1.0 / std::sqrt(lam_inv);
  out.outcome = LuLanczosExtremes::Outcome::kOk;
  return out;
}

}  // namespace jacond
