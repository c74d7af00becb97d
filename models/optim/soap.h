// SOAP: Shampoo with Adam in the Preconditioner's eigenbasis (Vyas et al., ICLR 2025), our C++
// implementation of the paper's Algorithm 3 with the defaults of the public reference.
//
// For a parameter W with gradient G, viewed as a matrix [m, k] (2-D as is; leading size-1 dims
// dropped, so pos_embed [1, n, d] is [n, d]; a conv weight [o, i, p, p] as [o, i·p·p]); what is
// 1-D after that (biases, LayerNorm, cls_token [1, 1, d]) gets plain AdamW (adamw.h's adamw_step):
//
//   L ← β_s L + (1−β_s) G Gᵀ    (m×m)        R ← β_s R + (1−β_s) Gᵀ G    (k×k)
//   Q_L, Q_R  eigenbases of L, R: eigh at the first step (that step only collects statistics
//             and makes no update, as the reference), then every `precondition_frequency` steps
//             one power-iteration step  Q ← qr(L Q[:, π]).Q  where π sorts the current
//             eigenvalue estimates diag(Qᵀ L Q) in descending order, and the second moment V is
//             permuted by π along that side so each coordinate keeps its statistics.
//   G' = Q_Lᵀ G Q_R                         rotate into the eigenbasis
//   M  ← β₁ M + (1−β₁) G                     first moment, parameter space (paper Alg. 3)
//   V  ← β₂ V + (1−β₂) G'∘G'                 second moment, eigenbasis
//   N' = (Q_Lᵀ M Q_R / (1−β₁ᵗ)) / (sqrt(V / (1−β₂ᵗ)) + ε)     Adam in the eigenbasis
//   W  ← W (1 − lr·wd) − lr · Q_L N' Q_Rᵀ    decoupled weight decay, then the rotated-back step
//
// A side longer than `max_precond_dim` is left unpreconditioned (its Q is the identity). The
// ε/bias-correction placement and the decay-before-step order follow torch.optim.AdamW, so with
// Q_L = Q_R = I the update is AdamW's exactly (the reference differs by ε·sqrt(1−β₂ᵗ) and by
// decaying after the step: both negligible). Eigen-decompositions and QR run in fp64.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace jacond::models {

struct SoapOptions {
  double lr = 3e-3;
  double beta1 = 0.95, beta2 = 0.95;
  double shampoo_beta = -1;   // < 0: use beta2 (the reference's default)
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t precondition_frequency = 10;
  int64_t max_precond_dim = 10000;
  /// Tests/ablation: start from Q = I and never refresh it (then SOAP is AdamW).
  bool identity_basis = false;
};

class Soap {
 public:
  /// `decay[i]` says whether params[i] receives weight decay (default: all do).
  Soap(std::vector<torch::Tensor> params, SoapOptions options, std::vector<bool> decay = {});

  /// One step from the parameters' .grad(); parameters without a gradient are skipped.
  void step();
  /// Drops the gradients (set to none, as torch.optim's zero_grad): the next backward writes them
  /// afresh instead of adding to zeros.
  void zero_grad();
  void set_lr(double lr) { opt_.lr = lr; }
  double lr() const { return opt_.lr; }
  const SoapOptions& options() const { return opt_; }

  /// Every state tensor under "p{i}.{name}"; the layout is checked on load (one-line errors).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

  /// Eigenbasis of side 0 (L, rows) or 1 (R, columns) of parameter i; undefined if that side
  /// is not preconditioned or no step has been taken. For tests.
  torch::Tensor eigenbasis(size_t i, int side) const;
  /// Steps taken by parameter i (the statistics-only first step counts).
  int64_t steps(size_t i) const { return state_.at(i).step; }

 private:
  struct State {
    int64_t step = 0;  // calls that saw a gradient
    torch::Tensor exp_avg, exp_avg_sq;  // M (parameter space), V (eigenbasis, [m, k] view)
    torch::Tensor GG[2];                 // L, R
    torch::Tensor Q[2];                  // Q_L, Q_R
  };
  void step_matrix(torch::Tensor& p, const torch::Tensor& grad, State& s, bool decay);
  void refresh_eigenbasis(State& s);
  torch::Tensor project(const torch::Tensor& g2, const State& s) const;       // Q_Lᵀ G Q_R
  torch::Tensor project_back(const torch::Tensor& g2, const State& s) const;  // Q_L G Q_Rᵀ

  std::vector<torch::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<State> state_;
  SoapOptions opt_;
};

}  // namespace jacond::models
