// What an iterative solver (analysis/spectral/gkl.h) sees of an operator: OperatorRef, its
// products on host vectors, type-erased; and KrylovBasis, the long vectors of one GKL run behind
// one interface, so that they can live where the operator's products run (docs/design.md §10).
//
// A run keeps two orthonormal bases, P (cols × (k+1), the right vectors p_j) and Q (rows × k, the
// left vectors q_j), and one work vector per side. Everything else of the run, B_k, its SVDs,
// the bounds and the stopping rules, is k × k and stays on the host in gkl.cpp. What the run asks
// of the long vectors is this, and nothing more:
//   product        work_Q ← K p_j  or  work_P ← Kᵀ q_j                    (the operator)
//   orthogonalise  classical Gram–Schmidt, twice (CGS2), of a work vector against the first j
//                  columns of its basis: h = V_jᵀ w, w ← w − V_j h, twice; returns Σ h (B's column)
//   norm, store    ‖w‖; column j ← w / α
//   set            column j ← x, work ← x (a start vector, a random vector after a breakdown)
//   combination    V_kk c on the host (the Ritz vectors ũ = Q U_B e_i, ṽ = P V_B e_i)
//   restart        P_ℓ ← P_kk V_sel, p_{ℓ+1} ← p_{kk+1}, Q_ℓ ← Q_kk U_sel (thick restart)
//   apply          K x or Kᵀ x for a host vector x (the explicit residual of a Ritz triplet)
// HostKrylovBasis: Eigen matrices and an OperatorRef, the code gkl.cpp had inline (its reports
// are bit-identical to before the interface). A device's twin (models/device TorchKrylovBasis,
// made by OperatorDevice::krylov_space) does the same on device memory next to its products; its
// host traffic is j coefficients and a norm per step. Both pass the same contract test
// (tests/support/krylov_basis_contract.h).
#pragma once

#include <functional>
#include <memory>

#include "analysis/core/types.h"

namespace jacond {

/// Type-erased operator (the products are O(n²d + nd²), so one indirect call per product is free).
struct OperatorRef {
  Index rows = 0, cols = 0;
  std::function<void(const double*, double*)> apply;            // y = K x
  std::function<void(const double*, double*)> apply_transpose;  // y = Kᵀ x
};

template <typename Op>
OperatorRef make_operator_ref(const Op& op) {
  OperatorRef r;
  r.rows = op.rows();
  r.cols = op.cols();
  r.apply = [&op](const double* x, double* y) { op.perform_op(x, y); };
  r.apply_transpose = [&op](const double* x, double* y) { op.perform_op_transpose(x, y); };
  return r;
}

/// P (right vectors, length cols) or Q (left vectors, length rows).
enum class KrylovSide { kRight, kLeft };

class KrylovBasis {
 public:
  virtual ~KrylovBasis() = default;
  /// The work vector of the other side ← K p_j (from = kRight) or Kᵀ q_j (from = kLeft).
  /// Returns false when the result holds NaN or inf.
  virtual bool product(KrylovSide from, Index j) = 0;
  /// CGS2 of `side`'s work vector against the first j columns of its basis; returns the
  /// accumulated coefficients (length j).
  virtual Vec orthogonalise(KrylovSide side, Index j) = 0;
  /// ‖work‖ of `side`.
  virtual double work_norm(KrylovSide side) const = 0;
  /// Column j of `side` ← work / alpha.
  virtual void store(KrylovSide side, Index j, double alpha) = 0;
  /// Column j of `side` ← x.
  virtual void set_column(KrylovSide side, Index j, const Vec& x) = 0;
  /// `side`'s work vector ← x.
  virtual void set_work(KrylovSide side, const Vec& x) = 0;
  /// (first kk columns of `side`) · c, on the host.
  virtual Vec combination(KrylovSide side, Index kk, const Vec& c) const = 0;
  /// Thick restart with ℓ = V_sel.cols() = U_sel.cols(): P_ℓ ← P_kk V_sel, column ℓ of P ←
  /// column kk of P, Q_ℓ ← Q_kk U_sel (V_sel, U_sel: kk × ℓ, ℓ < kk).
  virtual void restart(Index kk, const Mat& V_sel, const Mat& U_sel) = 0;
  /// K x (transpose = false, x of length cols) or Kᵀ x, for a host vector.
  virtual Vec apply(bool transpose, const Vec& x) const = 0;
};

/// An operator's shape and how to make a basis of k columns for it (rows ≥ cols).
struct KrylovSpace {
  Index rows = 0, cols = 0;
  std::function<std::unique_ptr<KrylovBasis>(Index k)> make_basis;
};

/// The host's KrylovBasis: P, Q and the work vectors in Eigen, products through `op`.
class HostKrylovBasis final : public KrylovBasis {
 public:
  /// `op` must outlive the basis.
  HostKrylovBasis(const OperatorRef& op, Index k);
  bool product(KrylovSide from, Index j) override;
  Vec orthogonalise(KrylovSide side, Index j) override;
  double work_norm(KrylovSide side) const override;
  void store(KrylovSide side, Index j, double alpha) override;
  void set_column(KrylovSide side, Index j, const Vec& x) override;
  void set_work(KrylovSide side, const Vec& x) override;
  Vec combination(KrylovSide side, Index kk, const Vec& c) const override;
  void restart(Index kk, const Mat& V_sel, const Mat& U_sel) override;
  Vec apply(bool transpose, const Vec& x) const override;

 private:
  Mat& basis(KrylovSide side) { return side == KrylovSide::kRight ? P_ : Q_; }
  const Mat& basis(KrylovSide side) const { return side == KrylovSide::kRight ? P_ : Q_; }
  Vec& work(KrylovSide side) { return side == KrylovSide::kRight ? work_P_ : work_Q_; }
  const Vec& work(KrylovSide side) const { return side == KrylovSide::kRight ? work_P_ : work_Q_; }

  const OperatorRef& op_;
  Mat P_, Q_;
  Vec work_P_, work_Q_;
};

/// The host space of an operator with rows ≥ cols: HostKrylovBasis over `op` (kept by reference).
KrylovSpace host_krylov_space(const OperatorRef& op);

}  // namespace jacond
