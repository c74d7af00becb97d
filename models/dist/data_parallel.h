// Data parallelism for a torch::nn::Module: what Python's DistributedDataParallel does, in C++,
// on the same engine (c10d::Reducer).
//
// The math. The global batch of B images is split into W equal shards; rank r computes the
// local loss ℓ_r = (1/(B/W)) Σ_{i∈shard r} ℓ_i and its gradient g_r. The reducer averages,
//   g = (1/W) Σ_r g_r = (1/B) Σ_i ∇ℓ_i,
// which is the single-process gradient of the global batch (up to the order of fp32 sums). Every
// rank then holds the same g and the same parameters, so every rank's optimizer (AdamW or SOAP,
// deterministic functions of (parameters, g, state)) takes the same step and keeps the same state:
// no optimizer state is communicated.
//
// How. c10d::Reducer puts the gradients into buckets (25 MiB, the first 1 MiB, in reverse
// parameter order, as DDP does), hooks every parameter's gradient accumulator, and all-reduces a
// bucket as soon as the backward pass has filled it, overlapping communication with the rest of
// the backward; the averaged bucket is copied back into .grad before backward() returns.
//
// The one assumption: every parameter receives a gradient in every step (no unused parameters;
// the Reducer fails loudly otherwise). Buffers (BatchNorm's running statistics) are broadcast
// from rank 0 before every training forward, as DDP's broadcast_buffers does, so the ranks'
// evaluation models agree.
#pragma once

#include <memory>

#include <torch/torch.h>

#include "models/dist/process_group.h"

namespace c10d {
class Reducer;
}

namespace jacond::models::dist {

/// Copies rank 0's parameters and buffers into every rank's `module` (DDP's start).
void broadcast_module_state(torch::nn::Module& module, RankGroup& group);

/// Throws std::runtime_error on every rank when the ranks' parameters are not bitwise equal
/// (compared through rank 0's Σp and Σp², in fp64): a replica that drifted (a non-deterministic
/// kernel, different hardware) is reported at step `step` instead of silently averaged. NaN or
/// inf parameters on any rank are reported first, as a diverged run (NaN ≠ NaN read as drift).
void check_replicas_agree(torch::nn::Module& module, RankGroup& group, int64_t step);

/// Whether every parameter of `module` is finite (no NaN, no ±inf).
bool parameters_finite(torch::nn::Module& module);

/// The one-line error of a run whose parameters are no longer finite at `step`.
std::string diverged_parameters_message(int64_t step);

/// Gradient averaging across the ranks for one module; call before_forward() before every
/// training forward and backward(loss) instead of loss.backward().
class GradientAverager {
 public:
  /// The module's parameters (in this order on every rank) and their names for error messages.
  GradientAverager(torch::nn::Module& module, RankGroup& group, int64_t bucket_bytes = 25 << 20);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  /// Rebuilds the buckets in gradient-arrival order after the first step (DDP) and broadcasts
  /// rank 0's buffers.
  void before_forward();
  /// loss.backward() with the reducer armed: returns with every gradient averaged over the
  /// ranks; a failed all-reduce throws as run_collective does.
  void backward(const torch::Tensor& loss);

 private:
  torch::nn::Module& module_;
  RankGroup& group_;
  std::unique_ptr<c10d::Reducer> reducer_;
};

}  // namespace jacond::models::dist
