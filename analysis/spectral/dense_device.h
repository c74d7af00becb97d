// Where the dense exact routes run: the host (LAPACKE/OpenBLAS) or a back end such as the GPU
// (analysis/cuda/dense_cuda.h). The analysis core stays device-agnostic: block_reports,
// `jacond spectrum` and the benchmarks take a DenseDevice and call its two routines; a back end
// implements the same two with the same contract, so a report does not depend on where it was
// computed beyond its `method` (e.g. dense-lu-lanczos vs dense-lu-lanczos-cuda) and round-off.
//
//   condition_fast(A)    κ by one LU and two Lanczos runs (analysis/spectral/lu_lanczos.h); status
//                        exact or singular, as condition_fast in condition.h
//   singular_values(A)   every singular value, descending (condition.h: singular_values)
//   condition_mixed(A32, A)  κ from an fp32 LU of A32 = fl₃₂(A) refined to fp64 against the
//                        operator A (analysis/spectral/mixed_lu.h); not-converged when κ·u₃₂ is too
//                        large for the refinement, and the caller falls back to condition_fast
//   ldlt(lower)          H = P L D Lᵀ Pᵀ of a symmetric indefinite H (analysis/spectral/ldlt.h),
//                        the factorisation behind the inertia certificates (analysis/spectral/
//                        inertia.h); the host's is rook-pivoted dsytrf_rk
//   fits(route, r, c, budget)  the `auto` rule (analysis/spectral/dense_cost.h) on this device:
//                        whether the route's working set for an r × c matrix fits the budget, and
//                        its predicted time where this device has a measured rate (the host's)
//
//   condition_fast_assembled(map)  condition_fast of a block operator's matrix assembled on the
//                        device from the products of its device twin (analysis/operators/
//                        operator_device.h), where device and map can; the GPU's K_sa, B_sa, E_sa and
//                        K_sab under `--device cuda` with a CUDA LibTorch. Where the whole LU does
//                        not fit the device but a half, a third, … of it does, the Schur route instead
//   condition_schur(map, plan)  κ by a block LU in pieces whose off-diagonal blocks stay matrix-free
//                        (analysis/spectral/schur_lu.h): exact fp64 κ of ViT-B's K_sa on one H200
//                        (two pieces) or H100 (three)
//
// What stays on the host on every device: assembling the matrix elsewhere (the closed-form
// Jacobians of analysis/jacobians: certificates, the mixed and SVD routes, a LibTorch without
// CUDA), the per-token spectra of K_mlp/K_ffn (d × d blocks), the per-head softmax
// and attention maps, and the O(M²) rest of an inertia certificate (the count from D, the
// rounding radius from |L||D||Lᵀ|: inertia.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "analysis/core/types.h"
#include "analysis/operators/operator_device.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_cost.h"
#include "analysis/spectral/ldlt.h"
#include "analysis/spectral/mixed_lu.h"
#include "analysis/spectral/schur_lu.h"

namespace jacond {

/// The dense routes: condition_fast (κ from the extremes), the full spectrum, and a certificate's
/// three inertia counts (three LDLᵀ of the (rows + cols)² augmented matrix: inertia.h).
enum class DenseRoute { kFast, kSvd, kInertia };

class DenseDevice {
 public:
  virtual ~DenseDevice() = default;
  /// "cpu", "cuda", ... (the `--device` value).
  virtual std::string name() const = 0;
  /// A one-line description for run.json and logs (the GPU's name and free memory).
  virtual std::string description() const = 0;
  virtual ConditionReport condition_fast(Mat A, const std::string& matrix) const = 0;
  /// condition_fast of the map's matrix, assembled where this device factorises it
  /// (TokenMap::assemble): no host matrix, no copy. nullopt where it is not done here (the host;
  /// a map whose products are host kernels; a size this device's fast route leaves to the host;
  /// too little device memory): the caller assembles on the host and calls condition_fast.
  /// `checkpoint`: the Schur route's cancellation point where it takes that route (SchurLuBackend).
  virtual std::optional<ConditionReport> condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                                  const std::function<void()>& checkpoint = {}) const {
    (void)map, (void)matrix, (void)checkpoint;
    return std::nullopt;
  }
  /// κ of the map's matrix by the Schur route (analysis/spectral/schur_lu.h: the diagonal pieces'
  /// Schur complements dense on this device, the off-diagonal blocks matrix-free) with `plan`: the
  /// route condition_fast_assembled takes where the whole LU does not fit, forced here (the tests
  /// run it on small maps). nullopt where this device cannot run it on this map. `checkpoint`:
  /// SchurLuBackend's cancellation point.
  virtual std::optional<ConditionReport> condition_schur(const TokenMap& map, const SchurPlan& plan,
                                                         const std::string& matrix,
                                                         const std::function<void()>& checkpoint = {}) const {
    (void)map, (void)plan, (void)matrix, (void)checkpoint;
    return std::nullopt;
  }
  virtual Vec singular_values(Mat A) const = 0;
  virtual ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const = 0;
  virtual bool fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const = 0;
  /// H = P L D Lᵀ Pᵀ from H's lower triangle (analysis/spectral/ldlt.h). The default is the
  /// host's rook-pivoted ldlt_rook; a device that cannot hold H answers with the host's too.
  virtual std::unique_ptr<LdltFactors> ldlt(Mat lower) const { return ldlt_rook(std::move(lower)); }

  /// The method name of this device's full spectrum: "dense-svd" on the host, "dense-svd-<name>"
  /// elsewhere.
  std::string svd_method() const;
  /// κ from singular_values(A): condition_svd's report (condition.h), method svd_method(), timed.
  ConditionReport condition_svd(Mat A, const std::string& matrix) const;
};

/// The host: condition_fast and singular_values of condition.h, condition_mixed of mixed_lu.h; fits() is dense_cost.h's rule with
/// fast_route_cost / svd_route_cost at get_threads() threads.
class CpuDenseDevice final : public DenseDevice {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  ConditionReport condition_fast(Mat A, const std::string& matrix) const override;
  /// The host's Schur route (condition_schur of schur_lu.h) on a map that assembles into host memory.
  std::optional<ConditionReport> condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                                 const std::function<void()>& checkpoint = {}) const override;
  Vec singular_values(Mat A) const override;
  ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const override;
  bool fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const override;
};

/// The shared host device (what a null DenseDevice pointer means everywhere).
std::shared_ptr<const DenseDevice> cpu_dense_device();

}  // namespace jacond
