// An independent LibTorch reference forward of one pre-norm ViT block, built from torch ops only
// (torch::layer_norm, torch::linear, torch::softmax, exact torch::gelu, matmul) on the timm
// TensorMap, in fp64 and differentiable: the autograd oracle for the analytic Jacobians
// (docs/design.md §8). It shares no code with analysis/ or models/bridge.
//
// Tensors are torch row-major [n, d] (token i = row i). Weights are used as stored (Linear:
// y = x Wᵀ + b with the stored weight Wᵀ), which is the paper's y = x W + b.
//   SA(Y)  = Concat_h(A_h V_h) W^O + b_O,  A_h = softmax_rows(s · Q_h K_hᵀ),  s = logit_scale or
//            1/sqrt(d_h) when logit_scale == 0;  head h = columns [h·d_h, (h+1)·d_h).
//   MLP(Y) = gelu(Y W_1 + b_1) W_2 + b_2 (exact erf GELU).
//   SAB: X -> SA(LN1 X) (+X),  FFN: X -> MLP(LN2 X) (+X)   (docs/design.md §2)
#pragma once

#include <cstdint>
#include <functional>

#include "analysis/core/types.h"
#include "models/io/tensor_map.h"

namespace jacond::models {

struct TorchBlockSpec {
  int64_t layer = 0;
  int64_t heads = 1;
  double logit_scale = 0;  // 0 => 1/sqrt(d_h)
  double ln_eps = 1e-6;
};

/// LN1(X), X [n, d].
at::Tensor torch_layernorm1(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& X);
/// LN2(X), X [n, d].
at::Tensor torch_layernorm2(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& X);
/// Bare multi-head SA(Y) [n, d] with all biases.
at::Tensor torch_attention(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& Y);
/// Attention maps A_h, stacked [heads, n, n].
at::Tensor torch_attention_maps(const TensorMap& w, const TorchBlockSpec& spec,
                                const at::Tensor& Y);
/// Bare MLP(Y) [n, d].
at::Tensor torch_mlp(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& Y);
/// SAB: SA(LN1 X) (+ X when residual).
at::Tensor torch_sab(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& X,
                     bool residual);
/// FFN: MLP(LN2 X) (+ X when residual).
at::Tensor torch_ffn(const TensorMap& w, const TorchBlockSpec& spec, const at::Tensor& X,
                     bool residual);

/// Dense Jacobian ∂vec f(X)/∂vec X by reverse-mode autograd, one torch::autograd::grad call per
/// output entry. X is n×d; f maps a [n, d] fp64 tensor to a 1-D [p] or 2-D [p, q] tensor.
/// vec is COLUMN-MAJOR as in analysis/core/types.h: row index i + a·p (output entry (i, a)), column
/// index j + b·n (input token j, feature b), so for f(X) = X W the result is Wᵀ ⊗ I_n.
/// Torch's own flattening is row-major; this function does the reordering.
jacond::Mat torch_jacobian(const std::function<at::Tensor(const at::Tensor&)>& f,
                           const jacond::Mat& X);

}  // namespace jacond::models
