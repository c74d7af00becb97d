// Where the matrix-free products of the lanczos route run (docs/design.md §10, issue 11 item 3).
//
// The GKL solver (analysis/spectral/gkl.h) needs two things of an operator: y = K x and y = Kᵀ x.
// On the host they are the kernels of analysis/operators/block_kernels.h. An OperatorDevice makes
// the same six block operators somewhere else (the GPU), behind the same products on host vectors:
//   K_sa, B_sa, E_sa   bare attention at Y = LN1(X) and its Prop. 2 split (paper Eq. 10/13)
//   K_sab              X -> SA(LN1 X) (+ X)
//   K_mlp              bare MLP at LN2(X1)
//   K_ffn              X1 -> MLP(LN2 X1) (+ X1)
// each an n × d -> n × d linear map on token matrices (vec column-major, analysis/core/types.h).
// A device may also keep GKL's basis beside its products (krylov_space: the long vectors of
// analysis/operators/krylov_basis.h on the device; full-space brackets then move j coefficients
// and a norm per step to the host, not vectors). Everything else of the route stays on the host:
// the k × k recurrence, its bounds and statuses (so a device changes a report only by round-off
// and by its `method`, gkl-<device>) and the inertia certificates. The LayerNorm-complement
// restriction of K_sab and K_ffn (the skipless rows) is the device's too where it has one
// (ln_complement); otherwise LnComplementOp wraps the device's host-vector products. Design §10.
//
// The analysis core never names a device: the one implementation today is LibTorch's ATen
// (models/device/torch_operator_device.h), which runs the same code on the CPU (tested there
// against block_kernels to 1e-12 in CI) and on CUDA (cuBLAS; the GPU test compares the two).
#pragma once

#include <memory>
#include <string>

#include "analysis/core/types.h"
#include "analysis/jacobians/block.h"
#include "analysis/operators/krylov_basis.h"
#include "analysis/operators/operators.h"

namespace jacond {

/// A linear map of n × d_in token matrices to n × d_out ones, applied elsewhere (a device).
class TokenMap {
 public:
  virtual ~TokenMap() = default;
  virtual Index n() const = 0;
  virtual Index d_in() const = 0;
  virtual Index d_out() const = 0;
  /// unvec(K vec dX) (JVP).
  virtual Mat apply(const Mat& dX) const = 0;
  /// unvec(Kᵀ vec G) (VJP).
  virtual Mat apply_transpose(const Mat& G) const = 0;
  /// Writes K itself (n·d_out × n·d_in, column-major, leading dimension n·d_out) into
  /// `device_out`: memory for it where this map's products run (a GPU's global memory; host memory
  /// for a host-side device), from the products of unit inputs, so a dense device factorises it
  /// there with no host matrix and no copy (DenseDevice::condition_fast_assembled, design §10).
  /// False, writing nothing, where the map cannot; std::invalid_argument where an entry is NaN or
  /// inf; a device error as one line naming the operation.
  virtual bool assemble(double* device_out) const {
    (void)device_out;
    return false;
  }
  /// Columns [first, first + count) of K (n·d_out × count, column-major, leading dimension
  /// n·d_out) into `device_out`, in the memory assemble() writes: the same products of unit inputs,
  /// a panel at a time (the Schur route, analysis/spectral/schur_lu.h, never holds all of K). False
  /// where the map cannot; errors as assemble().
  virtual bool assemble_columns(Index first, Index count, double* device_out) const {
    (void)first, (void)count, (void)device_out;
    return false;
  }
  /// K times `count` inputs held in the memory assemble() writes: `device_in` n·d_in × count and
  /// `device_out` n·d_out × count, column-major (each column a vec'd token matrix). False where the
  /// map cannot; a device error as one line naming the operation.
  virtual bool apply_columns(const double* device_in, Index count, double* device_out) const {
    (void)device_in, (void)count, (void)device_out;
    return false;
  }
  /// Where assemble() writes: "cuda:K" (GPU K's global memory), "cuda" (the current GPU's), "cpu"
  /// (host memory), "" where it cannot. A dense device takes only the memory it works in, and the
  /// GPU's refuses a map on another GPU (dense_cuda.h, detail::assembles_on).
  virtual std::string assembles_into() const { return ""; }
  /// Device bytes assemble() allocates beside the matrix at its peak (a batch's intermediates), for
  /// the dense device's memory check.
  virtual double assembly_bytes() const { return 0; }
};

/// A TokenMap as a matrix-free operator (perform_op / perform_op_transpose, design §5), so GKL
/// and LnComplementOp take it like a host operator. Holds a reference: keep the map alive.
class TokenMapOp : public TokenOperator<TokenMapOp> {
 public:
  explicit TokenMapOp(const TokenMap& map) : map_(map) {}
  Index n_in() const { return map_.n(); }
  Index d_in() const { return map_.d_in(); }
  Index n_out() const { return map_.n(); }
  Index d_out() const { return map_.d_out(); }
  Mat apply(const Mat& dX) const { return map_.apply(dX); }
  Mat apply_transpose(const Mat& G) const { return map_.apply_transpose(G); }
  const TokenMap& map() const { return map_; }

 private:
  const TokenMap& map_;
};

class OperatorDevice {
 public:
  virtual ~OperatorDevice() = default;
  /// "cuda", "torch-cpu", ...: reports made with it say method gkl-<name>.
  virtual std::string name() const = 0;
  /// One line for run.json and logs.
  virtual std::string description() const = 0;
  /// The block operator `matrix` (K_sa, B_sa, E_sa, K_sab, K_mlp or K_ffn) at the forward pass
  /// f of w, its weights and caches copied to the device (the map owns them). Throws
  /// std::invalid_argument for another name.
  virtual std::unique_ptr<TokenMap> block_operator(const BlockWeights& w, const BlockForward& f,
                                                   const std::string& matrix) const = 0;
  /// The Krylov space of `map` (one of this device's block operators) with GKL's basis on this
  /// device, beside the products (analysis/operators/krylov_basis.h): condition_lanczos on it moves
  /// no long vector to the host per step. Empty (no make_basis): this device keeps bases on the
  /// host, and the solver takes TokenMapOp's host products instead.
  virtual KrylovSpace krylov_space(const TokenMap& map) const {
    (void)map;
    return {};
  }
  /// `map` (one of this device's maps) restricted on its input to the LayerNorm complement:
  /// LnComplementOp's K · blockdiag_i(C_i), n × (d − 2) -> n × d_out, with the C_i applied on this
  /// device from their reflectors (LayerNormComplement::reflectors), so krylov_space of the result
  /// keeps the skipless rows' basis here too. Holds references to `map` and nothing of `basis`.
  /// Null (the default): block_reports wraps the device's host-vector products in LnComplementOp.
  virtual std::unique_ptr<TokenMap> ln_complement(const TokenMap& map, const LayerNormComplement& basis) const {
    (void)map;
    (void)basis;
    return nullptr;
  }
};

}  // namespace jacond
