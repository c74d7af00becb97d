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
// Scale. Spectra accepts a Ritz value θ once its residual is below tol·max(eps^(2/3), |θ|): an
// absolute floor (≈ 4e-24 at tol 1e-13) that passes an unconverged θ at once when the operator's
// top eigenvalue is tiny: σ_max² of a block whose branch has LayerScale γ = 1e-5, or σ_min⁻² when
// σ_min ≥ 1e7 (κ was 7–20 % off, labelled exact). Each run therefore works on the operator times a
// power of two (exact in binary floating point) that brings ‖op(x)‖ of one fixed unit x to [1, 2),
// and scales θ back.
//
// The one check (sigma_min_supported). For every unit v, σ_min(A) ≤ ‖A v‖; for the converged Ritz
// vector v of (AᵀA)⁻¹, ‖A v‖ = σ_min up to the route's accuracy. Two failures make the σ_min of
// the solves smaller than what its own vector shows, and the caller then answers with the SVD:
//   * the solves' forward error beyond backward stability: LU pivot growth (Wilkinson's 60 × 60
//     growth matrix gave κ 28.5 for 26.8);
//   * Spectra returning a value outside (AᵀA)⁻¹'s spectrum with status Successful (Kahan's
//     matrix, n = 80: λ = 8.5e72 where 3.2e25 is the largest possible).
// A `singular` claim is checked the same way: it needs ‖A v‖ ≤ the noise floor.
//
// The σ_max check (sigma_max_supported). Courant–Fischer: ‖A v‖ ≤ σ_max for every unit v, and for
// the converged top Ritz vector v of AᵀA, ‖A v‖² = vᵀAᵀAv is its Rayleigh quotient, equal to the
// Ritz value up to rounding. So a Ritz value above ‖A v‖² is not an eigenvalue Lanczos found: Spectra
// returns one with status Successful when its start vector (SimpleRandom(0), fixed) is an
// eigenvector of AᵀA (the Krylov space breaks down at once; a review's 100 × 100 A with a right
// singular vector equal to that start gave σ_max 2.0396 for a true 2, labelled exact, and a
// `certified` κ ∈ [203.961, 203.961] for a true 200). lu_lanczos_extremes computes ‖A v‖ by one more
// gram product (ρ = vᵀ(AᵀA v), before the factorisation overwrites A) and requires
// σ_max ≤ sqrt(ρ)(1 + 1e-9) + floor (the route's stated accuracy, as for σ_min, plus order·eps·σ_max,
// the Gram operator's order, for ρ's rounding at the top of the spectrum; the 1e-9 dominates). Failing that, σ_max is run
// again from a Gaussian start (a different Krylov space) and checked again; failing twice, the
// outcome is kNotConverged with `why` saying so, and the caller answers with the SVD (condition_fast)
// or not-converged (the mixed and Schur routes). The vector is returned (v_max) for callers that
// want ‖A v‖ themselves. A certificate never takes a route's σ_max as a proof: inertia.h's
// certify_extremes takes σ_max's lower end from Courant–Fischer on its own vector. Guarded by
// ConditionFast.AStartVectorThatIsASingularVectorDoesNotInflateSigmaMax (test_condition.cpp).
//
// Outcomes: kExactlySingular (a pivot or diagonal entry is exactly zero: the caller answers with
// an SVD, which gives the rank), kNotConverged (Lanczos did not converge, or the solve overflowed:
// numerically singular or pathologically clustered; the caller falls back likewise), kOk.
// Guarded by the condition_fast tests (tests/analysis/spectral/test_condition.cpp: the scale and
// the check by TinyAndHugeMatrices*, WilkinsonGrowth*, Kahan*) on the CPU and
// by tests/analysis/cuda/test_dense_cuda.cpp (CUDA against CPU on the same matrices) on a GPU.
#pragma once

#include <Spectra/SymEigsSolver.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "analysis/core/lapack.h"
#include "analysis/core/types.h"

namespace jacond {

/// Thrown by a backend's inverse_gram when (AᵀA)⁻¹ x overflows: A is numerically singular. A
/// numerical outcome, not a failure.
class NonFiniteSolve : public std::runtime_error {
 public:
  NonFiniteSolve() : std::runtime_error("(A^T A)^-1 x overflowed: A is numerically singular") {}
};

/// A back end's own failure (a CUDA call, analysis/cuda/dense_cuda.h; a LibTorch product of a
/// device's map, models/device/torch_operator_device.cpp, which the Schur route runs inside
/// Lanczos): never an outcome of the algorithm, so top_eigenvalue lets it through instead of
/// reporting "did not converge". A device's failure thrown as a plain std::runtime_error would be
/// read as that outcome (`finished` below).
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class FactorOutcome { kFactored, kExactlySingular };

struct LuLanczosExtremes {
  enum class Outcome { kOk, kExactlySingular, kNotConverged } outcome = Outcome::kNotConverged;
  double sigma_max = 0, sigma_min = 0;
  Vec v_max;           // unit Ritz vector of σ_max (checked: sigma_max_supported)
  Vec v_min;           // unit Ritz vector of σ_min (kOk only): the right singular vector's estimate
  Index products = 0;  // applications of AᵀA and (AᵀA)⁻¹ together
  std::string why;     // kNotConverged from a failed σ_max check: the reason, for the note (else empty)
};

/// Whether σ_max of an exact extremes route is supported by its Ritz vector v (the header's "σ_max
/// check"): `Av_norm` = ‖A v‖ for the unit v, `floor` = order·eps·σ_max (the header). σ_max may
/// exceed ‖A v‖ (≤ the true σ_max, Courant–Fischer) by 1e-9 relative plus the floor, no more.
inline bool sigma_max_supported(double sigma_max, double Av_norm, double floor) {
  return std::isfinite(Av_norm) && sigma_max <= Av_norm * (1 + 1e-9) + floor;
}

/// Whether σ_min of an exact extremes route is supported by its Ritz vector: `Av_norm` = ‖A v_min‖
/// computed in fp64 from A itself (not from its factors), `floor` = noise_floor(rows, cols, σ_max).
/// An exact σ_min (above the floor) may not lie below ‖A v‖ by more than 1e-9 relative (the
/// route's stated accuracy) plus the floor (the product's rounding); a singular one (at or below
/// the floor) needs ‖A v‖ ≤ floor, which proves σ_min ≤ floor. See "The one check" above.
inline bool sigma_min_supported(double sigma_min, double Av_norm, double floor) {
  if (!std::isfinite(Av_norm)) return false;
  if (sigma_min <= floor) return Av_norm <= floor;
  return Av_norm <= sigma_min * (1 + 1e-9) + floor;
}

/// "" when sigma_min_supported holds for e (kOk), else the note's reason, with both numbers.
inline std::string unsupported_sigma_min(const LuLanczosExtremes& e, double Av_norm, double floor) {
  if (sigma_min_supported(e.sigma_min, Av_norm, floor)) return "";
  std::ostringstream os;
  os.precision(6);
  os << "the solves' sigma_min " << e.sigma_min << " is below its Ritz vector's ||A v|| " << Av_norm
     << " (noise floor " << floor << ")";
  return os.str();
}

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

// `op` times a power of two (the file comment's "Scale"): Spectra sees eigenvalues near 1.
template <typename Op>
class ScaledOp {
 public:
  using Scalar = double;
  ScaledOp(Op& op, double scale) : op_(op), scale_(scale) {}
  Index rows() const { return op_.rows(); }
  Index cols() const { return op_.cols(); }
  void perform_op(const double* x, double* y) const {
    op_.perform_op(x, y);
    Eigen::Map<Vec>(y, rows()) *= scale_;
  }

 private:
  Op& op_;
  double scale_;
};

// The power of two 2^−e with ‖op(x)‖ · 2^−e in [1, 2) for one fixed pseudo-random unit x (one
// product, counted; not the constant vector, which Jacobians such as LayerNorm's annihilate). As
// ‖op(x)‖ ≤ λ_max, the scaled top eigenvalue is ≥ 1, far above Spectra's floor. 1 when the product
// is 0 (A = 0: σ_max = 0 is the answer). Throws what op throws.
template <typename Op>
double power_of_two_scale(Op& op, Index* products) {
  const Index n = op.rows();
  std::mt19937_64 rng(0x5ca1e);
  std::normal_distribution<double> normal;
  Vec x(n);
  for (Index i = 0; i < n; ++i) x(i) = normal(rng);
  x.normalize();
  Vec y(n);
  op.perform_op(x.data(), y.data());
  ++*products;
  const double size = y.stableNorm();  // no squares: a tiny operator's norm would underflow to 0
  if (!std::isfinite(size)) throw NonFiniteSolve();
  return size > 0 ? std::ldexp(1.0, -std::ilogb(size)) : 1.0;
}

// Runs `step` and says whether it finished: an outcome it throws (NonFiniteSolve, a failed
// refinement in mixed_lu.h, Spectra's tridiagonal solver failing on non-finite Ritz values: a
// std::runtime_error) is false, while a LapackError or a DeviceError is a failure and propagates.
template <typename Step>
bool finished(Step&& step) {
  try {
    step();
  } catch (const LapackError&) {
    throw;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::runtime_error&) {
    return false;
  }
  return true;
}

// Top eigenvalue (and its unit Ritz vector, when `vector` is given) of a symmetric positive
// semi-definite operator, run on the operator scaled by power_of_two_scale, from `start` (Spectra's
// fixed SimpleRandom(0) vector when null); false if Lanczos did not converge or overflowed
// (`finished`). The value is Spectra's Ritz value, unchecked: see the header's σ_max check.
template <typename Op>
bool top_eigenvalue(Op& op, double* value, Index* products, Vec* vector = nullptr, const Vec* start = nullptr) {
  double scale = 1.0;
  if (!finished([&] { scale = power_of_two_scale(op, products); })) return false;
  ScaledOp<Op> scaled(op, scale);
  Spectra::SymEigsSolver<ScaledOp<Op>> eigs(scaled, 1, std::min<Index>(op.rows(), 24));
  const bool ran = finished([&] {
    if (start) eigs.init(start->data());
    else eigs.init();
    eigs.compute(Spectra::SortRule::LargestAlge, 500, kLuLanczosTol);
  });
  *products += eigs.num_operations();
  if (!ran || eigs.info() != Spectra::CompInfo::Successful) return false;
  *value = eigs.eigenvalues()(0) / scale;
  if (vector) *vector = eigs.eigenvectors(1).col(0).normalized();
  return std::isfinite(*value);
}

}  // namespace detail

namespace detail {

// ‖A v‖ for a unit v through the backend's gram product: sqrt(vᵀ(AᵀA v)), one product.
template <typename Backend>
double gram_norm(Backend& backend, const Vec& v, Index* products) {
  Vec y(v.size());
  backend.gram(v.data(), y.data());
  ++*products;
  return std::sqrt(std::max(v.dot(y), 0.0));
}

// A fixed pseudo-random Gaussian unit vector (not Spectra's start): the σ_max check's second start.
inline Vec second_start(Index n) {
  std::mt19937_64 rng(0x5eca1d);
  std::normal_distribution<double> normal;
  Vec x(n);
  for (Index i = 0; i < n; ++i) x(i) = normal(rng);
  return x.normalized();
}

}  // namespace detail

/// σ_max by Lanczos on AᵀA (checked against its Ritz vector, the header's σ_max check), then the
/// factorisation, then σ_min by Lanczos on (AᵀA)⁻¹.
template <typename Backend>
LuLanczosExtremes lu_lanczos_extremes(Backend& backend) {
  LuLanczosExtremes out;
  double lam_max = 0, lam_inv = 0;
  detail::BackendGramOp<Backend, false> gram(backend);
  const Index n = backend.order();
  double Av_norm = 0;
  bool supported = false;
  for (int attempt = 0; attempt < 2 && !supported; ++attempt) {
    const Vec start = attempt == 0 ? Vec() : detail::second_start(n);
    if (!detail::top_eigenvalue(gram, &lam_max, &out.products, &out.v_max, attempt == 0 ? nullptr : &start))
      return out;
    out.sigma_max = std::sqrt(std::max(lam_max, 0.0));
    if (!detail::finished([&] { Av_norm = detail::gram_norm(backend, out.v_max, &out.products); })) return out;
    supported = sigma_max_supported(out.sigma_max, Av_norm, static_cast<double>(n) * std::numeric_limits<double>::epsilon() * out.sigma_max);
  }
  if (!supported) {
    std::ostringstream os;
    os.precision(6);
    os << "sigma_max's Ritz value " << out.sigma_max << " is above its Ritz vector's ||A v|| " << Av_norm
       << " from two starts";
    out.why = os.str();
    return out;
  }
  if (backend.factor(out.sigma_max) == FactorOutcome::kExactlySingular) {
    out.outcome = LuLanczosExtremes::Outcome::kExactlySingular;
    return out;
  }
  detail::BackendGramOp<Backend, true> inverse(backend);
  if (!detail::top_eigenvalue(inverse, &lam_inv, &out.products, &out.v_min) || !(lam_inv > 0)) return out;
  out.sigma_min = 1.0 / std::sqrt(lam_inv);
  out.outcome = LuLanczosExtremes::Outcome::kOk;
  return out;
}

}  // namespace jacond
