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
//
// The matrices of one [m, k] view, decay and step count form a group (MatrixGroup): their state is
// stacked along a leading batch dimension. On a device each line above is one batched operation
// (bmm, batched eigh and QR) for the whole group, as adamw.h's multi-tensor step is for the 1-D
// parameters. Why: on a GPU a small ViT's step is bound by kernel launches, and one matrix at a
// time issued ~22 operations per matrix (97 per block of 4 matrices and a bias; 185 on a refresh
// step), so SOAP's step at d 192, depth 6 was 1.65× AdamW's on the first H200 run (reports/gpu; a
// figure without its refreshes, so low: see reports/gpu/reading.md).
// Batched, the count is that of two blocks whatever the depth
// (Soap.OneShapesMatricesStepTogetherWhateverTheirNumber). On the CPU each member goes through all
// the operations in turn, on its slice of the group's state, while it is in cache: batched, the
// refresh took 1.4× as long there (d 192, depth 6, one thread; adamw.h made the same choice).
// Either way each matrix gets the same arithmetic as alone (Soap.AGroupStepsAsItsMembersWouldAlone,
// bitwise, in both orders). A member that misses a gradient leaves its group (the others step on;
// it keeps its step count). The checkpoint keeps one entry per parameter ("p{i}.exp_avg", …), as
// before grouping.
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
  /// Tests only: the device's order (a group's operations batched) on the CPU too.
  bool batched_on_cpu = false;
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
  int64_t steps(size_t i) const;
  /// How many groups the matrix parameters step in (MatrixGroup). For tests.
  size_t matrix_groups() const { return groups_.size(); }

 private:
  // A 1-D parameter's AdamW state.
  struct VectorState {
    int64_t step = 0;  // calls that saw a gradient
    torch::Tensor exp_avg, exp_avg_sq;
  };
  // The state of B matrices [m, k], stacked: a group's, or one member's slice of it (views).
  struct MatrixState {
    torch::Tensor exp_avg, exp_avg_sq;  // M (parameter space), V (eigenbasis): [B, m, k]
    torch::Tensor GG[2];                // L [B, m, m], R [B, k, k]; undefined: side unpreconditioned
    torch::Tensor Q[2];                 // Q_L, Q_R, as GG
    /// f applied to each defined tensor (undefined ones stay so).
    template <class F>
    MatrixState map(F f) const {
      auto at = [&](const torch::Tensor& t) { return t.defined() ? f(t) : torch::Tensor(); };
      return {at(exp_avg), at(exp_avg_sq), {at(GG[0]), at(GG[1])}, {at(Q[0]), at(Q[1])}};
    }
  };
  // Matrix parameters of one [m, k] view, decay and step count, stepped together: member b's
  // state is slice b.
  struct MatrixGroup {
    std::vector<size_t> members;  // indices into params_
    int64_t step = 0;             // calls that saw a gradient (the statistics-only first one counts)
    bool decay = true;
    MatrixState state;
  };
  // Where a matrix parameter's state is: groups_[group], slice `slot`; group < 0 before its first step.
  struct Slot {
    int group = -1;
    int64_t slot = 0;
  };

  void step_vectors();
  void step_matrices();
  void start_groups(const std::vector<size_t>& fresh);
  void split_off_members_without_gradient();
  void step_group(MatrixGroup& g);
  void update(const MatrixState& s, const torch::Tensor& G, std::vector<torch::Tensor> params, int64_t t,
              bool decay) const;
  void accumulate_statistics(const MatrixState& s, const torch::Tensor& G) const;
  void refresh_eigenbasis(const MatrixState& s) const;
  torch::Tensor gradients(const std::vector<size_t>& members) const;
  bool batched(const MatrixGroup& g) const;
  static MatrixGroup subgroup(const MatrixGroup& g, const std::vector<int64_t>& slots);
  void index_members();
  bool is_matrix(size_t i) const;

  std::vector<torch::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<bool> matrix_;          // by parameter index: preconditioned as a matrix (as_matrix 2-D)
  std::vector<VectorState> vectors_;  // by parameter index; used for the 1-D ones
  std::vector<MatrixGroup> groups_;
  std::vector<Slot> slots_;           // by parameter index; used for the matrices
  SoapOptions opt_;
};

}  // namespace jacond::models
