// LibTorch reference forward of one ViT block (the autograd oracle, docs/design.md §8). Torch ops only;
// see torch_block.h for the math.
#include "models/vit/torch_block.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace jacond::models {
namespace {

/// The fp64 weight "blocks.{layer}.{name}"; throws std::invalid_argument when missing.
torch::Tensor weight(const TensorMap& w, const TorchBlockSpec& spec, const std::string& name) {
  const std::string key = "blocks." + std::to_string(spec.layer) + "." + name;
  auto it = w.find(key);
  if (it == w.end()) throw std::invalid_argument("torch_block: missing key " + key);
  return it->second.to(torch::kFloat64);
}

torch::Tensor layernorm(const TensorMap& w, const TorchBlockSpec& spec, const std::string& norm,
                        const torch::Tensor& X) {
  const int64_t d = X.size(-1);
  return torch::layer_norm(X.to(torch::kFloat64), {d}, weight(w, spec, norm + ".weight"),
                           weight(w, spec, norm + ".bias"), spec.ln_eps);
}

struct QKV {
  torch::Tensor Q, K, V;  // [n, d] each, biases included
  int64_t head_dim = 0;
  double scale = 0;       // s in M_h = s Q_h K_hᵀ
};

QKV project_qkv(const TensorMap& w, const TorchBlockSpec& spec, const torch::Tensor& Y) {
  if (Y.dim() != 2) throw std::invalid_argument("torch_attention: Y must be [n, d]");
  const int64_t d = Y.size(1);
  if (spec.heads <= 0 || d % spec.heads != 0) {
    throw std::invalid_argument("torch_attention: d = " + std::to_string(d) +
                                " not divisible by heads = " + std::to_string(spec.heads));
  }
  // One Linear: [n, 3d] = Y (qkv.weight)ᵀ + qkv.bias, columns Q | K | V.
  torch::Tensor qkv = torch::linear(Y.to(torch::kFloat64), weight(w, spec, "attn.qkv.weight"),
                                    weight(w, spec, "attn.qkv.bias"));
  QKV r;
  r.Q = qkv.slice(1, 0, d);
  r.K = qkv.slice(1, d, 2 * d);
  r.V = qkv.slice(1, 2 * d, 3 * d);
  r.head_dim = d / spec.heads;
  r.scale = spec.logit_scale != 0 ? spec.logit_scale : 1.0 / std::sqrt(double(r.head_dim));
  return r;
}

/// A_h = softmax_rows(s Q_h K_hᵀ), head h = columns [h·d_h, (h+1)·d_h).
torch::Tensor head_map(const QKV& p, int64_t h) {
  const int64_t lo = h * p.head_dim, hi = lo + p.head_dim;
  torch::Tensor M = p.scale * torch::matmul(p.Q.slice(1, lo, hi), p.K.slice(1, lo, hi).t());
  return torch::softmax(M, /*dim=*/1);
}

}  // namespace

torch::Tensor torch_layernorm1(const TensorMap& w, const TorchBlockSpec& spec,
                               const torch::Tensor& X) {
  return layernorm(w, spec, "norm1", X);
}

torch::Tensor torch_layernorm2(const TensorMap& w, const TorchBlockSpec& spec,
                               const torch::Tensor& X) {
  return layernorm(w, spec, "norm2", X);
}

torch::Tensor torch_attention_maps(const TensorMap& w, const TorchBlockSpec& spec,
                                   const torch::Tensor& Y) {
  QKV p = project_qkv(w, spec, Y);
  std::vector<torch::Tensor> maps;
  for (int64_t h = 0; h < spec.heads; ++h) maps.push_back(head_map(p, h));
  return torch::stack(maps, 0);
}

torch::Tensor torch_attention(const TensorMap& w, const TorchBlockSpec& spec,
                              const torch::Tensor& Y) {
  QKV p = project_qkv(w, spec, Y);
  std::vector<torch::Tensor> outs;  // A_h V_h, [n, d_h] each
  for (int64_t h = 0; h < spec.heads; ++h) {
    const int64_t lo = h * p.head_dim, hi = lo + p.head_dim;
    outs.push_back(torch::matmul(head_map(p, h), p.V.slice(1, lo, hi)));
  }
  // Concat_h(A_h V_h) W^O + b_O.
  return torch::linear(torch::cat(outs, 1), weight(w, spec, "attn.proj.weight"),
                       weight(w, spec, "attn.proj.bias"));
}

torch::Tensor torch_mlp(const TensorMap& w, const TorchBlockSpec& spec, const torch::Tensor& Y) {
  torch::Tensor pre = torch::linear(Y.to(torch::kFloat64), weight(w, spec, "mlp.fc1.weight"),
                                    weight(w, spec, "mlp.fc1.bias"));
  return torch::linear(torch::gelu(pre, /*approximate=*/"none"),
                       weight(w, spec, "mlp.fc2.weight"), weight(w, spec, "mlp.fc2.bias"));
}

torch::Tensor torch_sab(const TensorMap& w, const TorchBlockSpec& spec, const torch::Tensor& X,
                        bool residual) {
  torch::Tensor out = torch_attention(w, spec, torch_layernorm1(w, spec, X));
  return residual ? out + X.to(torch::kFloat64) : out;
}

torch::Tensor torch_ffn(const TensorMap& w, const TorchBlockSpec& spec, const torch::Tensor& X,
                        bool residual) {
  torch::Tensor out = torch_mlp(w, spec, torch_layernorm2(w, spec, X));
  return residual ? out + X.to(torch::kFloat64) : out;
}

jacond::Mat torch_jacobian(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                           const jacond::Mat& X) {
  torch::AutoGradMode grad_on(true);
  const int64_t n = X.rows(), d = X.cols();

  // Eigen X is column-major; torch Xt[i][a] = X(i, a) (filled entry by entry, no layout tricks).
  torch::Tensor Xt = torch::empty({n, d}, torch::kFloat64);
  auto xa = Xt.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < d; ++a) xa[i][a] = X(i, a);
  Xt.set_requires_grad(true);

  torch::Tensor out = f(Xt);
  if (out.dim() == 1) out = out.unsqueeze(1);  // a vector is one column
  if (out.dim() != 2) {
    throw std::invalid_argument("torch_jacobian: f must return a 1-D or 2-D tensor, got " +
                                std::to_string(out.dim()) + "-D");
  }
  const int64_t p = out.size(0), q = out.size(1);
  jacond::Mat J = jacond::Mat::Zero(p * q, n * d);
  if (!out.requires_grad()) return J;  // f does not depend on X

  // Row (i + a·p) of J is the gradient of out[i][a]; its entry (j + b·n) is ∂out[i][a]/∂X[j][b].
  for (int64_t a = 0; a < q; ++a) {
    for (int64_t i = 0; i < p; ++i) {
      torch::Tensor seed = torch::zeros_like(out);
      seed.index_put_({i, a}, 1.0);
      auto grads = torch::autograd::grad({out}, {Xt}, {seed}, /*retain_graph=*/true,
                                         /*create_graph=*/false, /*allow_unused=*/true);
      if (!grads[0].defined()) continue;
      torch::Tensor g = grads[0].to(torch::kFloat64).contiguous();
      auto ga = g.accessor<double, 2>();
      const jacond::Index row = i + a * p;
      for (int64_t b = 0; b < d; ++b)
        for (int64_t j = 0; j < n; ++j) J(row, j + b * n) = ga[j][b];
    }
  }
  return J;
}

}  // namespace jacond::models
