// The block's matrix-free operators on a LibTorch device (ATen): the OperatorDevice of
// analysis/operators/operator_device.h that `--device cuda` gives the lanczos route.
//
// Why ATen, and why a second implementation (docs/design.md §10). A product of K_sa is a dozen
// GEMMs (batched over heads) and three row-wise reductions; ATen dispatches the same code to
// cuBLAS on CUDA and to OpenBLAS on the CPU, so every line below runs in CI on the CPU device and
// is compared there with the host kernels (analysis/operators/block_kernels.h) to 1e-12; the GPU
// test compares the CUDA device with the same kernels. Hand-written CUDA would be tested only in
// the rare session with a GPU. The host kernels stay the one implementation the analysis core
// uses (it never includes torch); this is their device twin, input tangents only (no parameter
// tangents, which only the network Jacobians of analysis/operators/network.h use).
//
// The math is block_kernels.h's, heads batched ([h, n, d_h] tensors, head h = columns
// [h d_h, (h+1) d_h)):
//   LayerNorm  P dx = σ⁻¹ (dx − mean(dx) − x̂ ⟨x̂, dx⟩/d);  JVP γ ∘ P dx,  VJP P (γ ∘ g)
//   K_sa       dH_h = A_h dV_h + S_A(s (dQ_h K_hᵀ + Q_h dK_hᵀ)) V_h,  dSA = dH W^O
//              (dQ = dY W^Q, …; S_A(M) row i = a_i ∘ (m_i − ⟨a_i, m_i⟩): the softmax Jacobian,
//              symmetric); B_sa keeps the first term, E_sa the second (paper Eq. 10/13)
//   K_sa ᵀ     gH = G W^Oᵀ;  gV_h = A_hᵀ gH_h;  gM_h = s S_A(gH_h V_hᵀ);  gQ_h = gM_h K_h,
//              gK_h = gM_hᵀ Q_h;  gY = gQ W^Qᵀ + gK W^Kᵀ + gV W^Vᵀ
//   K_mlp      (dY W_1 ∘ gelu'(pre)) W_2;  ᵀ: (G W_2ᵀ ∘ gelu'(pre)) W_1ᵀ
//   K_sab      K_sa J_LN1 (+ I),  K_ffn = K_mlp J_LN2 (+ I)  (per the block's skip mode)
// gelu'(pre) is computed once on the host (analysis mlp_gelu_prime) and copied.
//
// Every product also takes a leading batch of inputs ([m, n, d]: the heads' GEMMs become batched
// ones), which assemble() uses: K = [K e_1 … K e_N] from unit inputs, m columns a batch, written
// straight into the caller's column-major matrix on the device (design §10: the dense GPU route
// then needs no host matrix and no copy). It is the same code as the products, so the dense
// matrix is the operator's to rounding, and is tested against the host's closed-form Jacobians.
// A product through the TokenMap interface copies its n × d input to the device and the result
// back; through krylov_space, GKL's basis lives on the device with the products (TorchKrylovBasis,
// design §10) and nothing of length nd crosses per step. ln_complement restricts K_sab / K_ffn to
// the LayerNorm complement there too (LnComplementOp's twin: C_i c = H_i0 H_i1 [0; 0; c], the
// reflectors of LayerNormComplement). The tensors are fp64 throughout.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "analysis/operators/operator_device.h"

namespace jacond::models {

class TorchOperatorDevice final : public OperatorDevice {
 public:
  /// Products on `device` (torch::kCPU or a CUDA device, which must exist). A map's assemble()
  /// (the dense matrix from its products, for a dense device that factorises it where it is) runs
  /// as many unit inputs at once as fit `assembly_batch_bytes` of intermediates.
  explicit TorchOperatorDevice(torch::Device device, double assembly_batch_bytes = kAssemblyBatchBytes);
  static constexpr double kAssemblyBatchBytes = 1e9;
  /// "cuda" on a CUDA device, "torch-cpu" on the CPU. A LibTorch error on the device (out of
  /// memory, a CUDA failure) becomes one DeviceError line (analysis/spectral/lu_lanczos.h) naming
  /// the operation and device: a failure, which Lanczos inside a dense route lets through, never
  /// an outcome it reports as "did not converge".
  std::string name() const override;
  std::string description() const override;
  std::unique_ptr<TokenMap> block_operator(const BlockWeights& w, const BlockForward& f,
                                           const std::string& matrix) const override;
  /// GKL's basis on this device beside the map's products (a map this device made; throws
  /// std::invalid_argument for another): P and Q as [k, n·d_in] and [k, n·d_out] fp64 tensors,
  /// CGS2 as two GEMVs per pass, the restart as one GEMM per side; the host receives j
  /// coefficients and a norm per step.
  KrylovSpace krylov_space(const TokenMap& map) const override;
  /// The map (one this device made) restricted to the LayerNorm complement on this device: C_i
  /// applied from its two Householder reflectors per token (O(nd) per product), so krylov_space
  /// of the result keeps the skipless rows' basis here; P is then [k+1, n·(d−2)], Q [k, n·d].
  std::unique_ptr<TokenMap> ln_complement(const TokenMap& map, const LayerNormComplement& basis) const override;
  const torch::Device& device() const { return device_; }

 private:
  std::unique_ptr<TokenMap> make_map(const BlockWeights& w, const BlockForward& f, const std::string& matrix) const;
  torch::Device device_;
  double assembly_batch_bytes_;
};

/// The device twin of `--device cuda` for the lanczos route: the CUDA device `index` (a
/// data-parallel rank's own GPU; 0 otherwise) when this LibTorch has CUDA and sees that GPU, else
/// null (`why`: the reason, e.g. "this LibTorch 1.13.1 has no CUDA device"; the caller says what it
/// does instead).
std::shared_ptr<const OperatorDevice> cuda_operator_device(std::string* why = nullptr, int index = 0);

}  // namespace jacond::models
