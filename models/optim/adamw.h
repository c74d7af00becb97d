// AdamW (Loshchilov & Hutter, ICLR 2019) with LibTorch's own arithmetic, stepped on a GPU as
// multi-tensor (`_foreach_*`) operations: one call per operation for all parameters of a group,
// not one per parameter. For each parameter p with gradient g at its step t (torch.optim.AdamW's
// formula, and torch::optim::AdamW's operation order):
//
//   p ← p · (1 − lr·wd)                                     decoupled weight decay, first
//   m ← β₁ m + (1−β₁) g          v ← β₂ v + (1−β₂) g∘g       the moments
//   p ← p − (lr / (1−β₁ᵗ)) · m / (sqrt(v) / sqrt(1−β₂ᵗ) + ε)
//
// Why: torch::optim::AdamW::step loops over the parameters and issues eight or nine tensor
// operations for each. On a GPU every one is a kernel launch, and a small ViT's step is bound by
// launches, not arithmetic: at d 192, depth 6 (80 parameters in two groups) one step is 666
// top-level ATen operations, against 17 in the multi-tensor order (counted through RecordFunction
// on the CPU; a `_foreach_` operation launches one kernel per chunk of tensors). Python's
// torch.optim.AdamW runs multi-tensor by default on CUDA; this class does the same from C++.
// On the CPU, where a call costs little but cache is what matters, it steps one tensor at a time
// through all the operations, as torch::optim::AdamW (one operation over the whole model at a time
// streams it through memory nine times: 8.2 against 11.3 ms a step at d 192, 1 thread).
// Either order gives the same numbers: on the CPU a `_foreach_` operation runs the per-tensor
// kernels one tensor after another, so the result is bitwise torch::optim::AdamW's.
//
// It IS a torch::optim::AdamW: the parameter groups, their options, the per-parameter state
// (AdamWParamState: step, exp_avg, exp_avg_sq) and save()/load() are the base class's, so
// checkpoints are interchangeable with those torch::optim::AdamW writes. Only step() differs.
// Parameters are bucketed by their step count (equal unless some missed a gradient), since the
// bias corrections are one scalar per call. amsgrad is not supported (std::invalid_argument).
//
// Guarded by tests/models/test_adamw.cpp: bitwise equal to torch::optim::AdamW on the CPU, in both
// orders, over steps with decay and no-decay groups and a parameter that skips a step; nine
// operations a step in the GPU's order for 4 parameters and for 40; steps interleaved with the
// base class's own step() (same state); a checkpoint round trip through the base class; and on a
// GPU (AdamWCuda.*) equal to torch::optim::AdamW on the same device and to the CPU's steps within
// fp32 rounding.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace jacond::models {

/// Tensors that take one AdamW step together: the parameters, their gradients and moments (the
/// moments and parameters are updated in place; handles share storage with the caller's tensors).
struct AdamWTensors {
  std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq;
};

/// AdamW's hyper-parameters for one step.
struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};

/// One AdamW step (the formula above) of every tensor in `b`, all at step t: multi-tensor
/// operations on a device, and on the CPU each tensor through all of them in turn (unless
/// multi_tensor_on_cpu, for tests). The one implementation of AdamW's update in jacond:
/// MultiTensorAdamW and SOAP's 1-D parameters call it.
void adamw_step(AdamWTensors& b, const AdamWHyper& h, int64_t t, bool multi_tensor_on_cpu = false);

class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  /// multi_tensor_on_cpu: tests only, the GPU's order (one call per operation) on the CPU too.
  MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
                   bool multi_tensor_on_cpu = false);

  /// One AdamW step from the parameters' .grad(); parameters without a gradient are skipped.
  torch::Tensor step(LossClosure closure = nullptr) override;

  /// Drops every gradient (as torch.optim's zero_grad(set_to_none=True)): the next backward
  /// writes fresh ones instead of adding to zeros, which saves a kernel per parameter twice.
  void clear_grads();

 private:
  bool multi_tensor_on_cpu_;
};

}  // namespace jacond::models
