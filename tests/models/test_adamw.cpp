// MultiTensorAdamW (models/optim/adamw.h) against its oracle, torch::optim::AdamW: bitwise on the
// CPU (the `_foreach_` operations run the same per-tensor kernels there), sharing the base class's
// state and checkpoints; on a GPU (AdamWCuda.*, skipped without one) within fp32 rounding of
// torch::optim::AdamW on the same device and of the CPU's steps.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/core/scoped_env.h"
#include "models/optim/adamw.h"
#include "support/aten_op_count.h"
#include "support/expect_gpu.h"

namespace {

using jacond::models::MultiTensorAdamW;
using torch::optim::AdamWOptions;

constexpr double kWeightDecay = 0.05;

// A small model's parameter shapes: a matrix and a position embedding (decayed, as timm), a bias
// and a LayerNorm weight (not decayed).
std::vector<torch::Tensor> make_params(const torch::Device& device) {
  auto gen = at::detail::createCPUGenerator(7);
  std::vector<torch::Tensor> ps;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{6, 5}, {1, 4, 3}, {5}, {6}})
    ps.push_back(torch::randn(shape, gen).to(device).requires_grad_(true));
  return ps;
}

std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

std::vector<torch::optim::OptimizerParamGroup> groups_of(const std::vector<torch::Tensor>& ps) {
  auto opts = [](double wd) {
    return std::make_unique<AdamWOptions>(AdamWOptions(1e-2).betas({0.9, 0.98}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{ps[0], ps[1]}, opts(kWeightDecay));
  groups.emplace_back(std::vector<torch::Tensor>{ps[2], ps[3]}, opts(0.0));
  return groups;
}

// Gradients for step s (the same for every copy): parameter 3 gets none at step 2, so its step
// count falls behind the others' (a second bucket); parameter 2's are of order ε (1e-8), so ε
// is visible in its update.
void set_grads(std::vector<torch::Tensor>& ps, int s) {
  auto gen = at::detail::createCPUGenerator(100 + s);
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto g = (torch::randn(ps[i].sizes(), gen) * (i == 2 ? 1e-8 : 1.0)).to(ps[i].device());
    ps[i].mutable_grad() = (i == 3 && s == 2) ? torch::Tensor() : g;
  }
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<AdamWOptions&>(g.options()).lr(lr);
}

// `steps` steps of `opt` over `ps` with a changing learning rate, as the trainer's schedule.
void run(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& ps, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    set_lr(opt, 1e-2 / s);
    set_grads(ps, s);
    opt.step();
  }
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].cpu(), b[i].cpu())) << "parameter " << i;
}

// Every parameter's step count, read from the optimizer's state map (in any order).
std::multiset<int64_t> step_counts(torch::optim::Optimizer& opt) {
  std::multiset<int64_t> steps;
  for (const auto& entry : opt.state()) steps.insert(static_cast<torch::optim::AdamWParamState&>(*entry.second).step());
  return steps;
}

std::string serialized(const torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load_serialized(torch::optim::Optimizer& opt, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  opt.load(archive);
}

TEST(AdamW, MultiTensorStepsAreBitwiseLibTorchs) {
  for (const bool multi_tensor_on_cpu : {false, true}) {
    SCOPED_TRACE(multi_tensor_on_cpu ? "one call per operation (the GPU's order)"
                                     : "one tensor at a time (the CPU's order)");
    auto ps = make_params(torch::kCPU);
    auto qs = clone_params(ps);
    torch::optim::AdamW reference(groups_of(ps), AdamWOptions(1e-2));
    MultiTensorAdamW multi(groups_of(qs), AdamWOptions(1e-2), multi_tensor_on_cpu);
    run(reference, ps, 1, 6);
    run(multi, qs, 1, 6);
    expect_equal(ps, qs);
    EXPECT_FALSE(torch::equal(qs[0], make_params(torch::kCPU)[0])) << "the steps moved nothing";
    // Parameter 3 missed step 2's gradient: 5 steps, the other three 6 (one state each).
    EXPECT_EQ(step_counts(multi), (std::multiset<int64_t>{5, 6, 6, 6}));
    EXPECT_EQ(step_counts(multi), step_counts(reference));
  }
}

TEST(AdamW, KeepsItsStateWhereTheBaseClassLooks) {
  // Steps by the base class's own step() on the same object, between multi-tensor ones: it finds
  // the moments this class wrote (else it would start them again at zero and step 1).
  auto ps = make_params(torch::kCPU);
  auto qs = clone_params(ps);
  torch::optim::AdamW reference(groups_of(ps), AdamWOptions(1e-2));
  MultiTensorAdamW multi(groups_of(qs), AdamWOptions(1e-2), /*multi_tensor_on_cpu=*/true);
  run(reference, ps, 1, 6);
  for (int s = 1; s <= 6; ++s) {
    set_lr(multi, 1e-2 / s);
    set_grads(qs, s);
    if (s % 2 == 0)
      multi.torch::optim::AdamW::step();
    else
      multi.step();
  }
  expect_equal(ps, qs);
  EXPECT_EQ(multi.state().size(), 4u);
}

TEST(AdamW, CheckpointsAreInterchangeableWithLibTorchs) {
  // The uninterrupted run: 5 steps of torch::optim::AdamW.
  auto ps = make_params(torch::kCPU);
  torch::optim::AdamW reference(groups_of(ps), AdamWOptions(1e-2));
  run(reference, ps, 1, 5);
  for (const bool multi_first : {true, false}) {
    SCOPED_TRACE(multi_first ? "saved by MultiTensorAdamW, resumed by torch::optim::AdamW" : "the other way round");
    auto qs = make_params(torch::kCPU);
    std::string bytes;
    {
      MultiTensorAdamW multi(groups_of(qs), AdamWOptions(1e-2));
      torch::optim::AdamW plain(groups_of(qs), AdamWOptions(1e-2));
      torch::optim::Optimizer& first = multi_first ? static_cast<torch::optim::Optimizer&>(multi) : plain;
      run(first, qs, 1, 3);
      bytes = serialized(first);
    }
    auto resumed = clone_params(qs);  // a new process: new tensors, new state keys
    MultiTensorAdamW multi(groups_of(resumed), AdamWOptions(1e-2));
    torch::optim::AdamW plain(groups_of(resumed), AdamWOptions(1e-2));
    torch::optim::Optimizer& second = multi_first ? static_cast<torch::optim::Optimizer&>(plain) : multi;
    load_serialized(second, bytes);
    run(second, resumed, 4, 2);
    expect_equal(ps, resumed);
  }
}

int64_t ops_of_one_step(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& ps) {
  set_grads(ps, 1);
  opt.step();  // the first step creates the state (zeros_like per parameter)
  set_grads(ps, 3);
  return jacond::test::count_top_level_ops([&] { opt.step(); }).all;  // on a GPU, a launch or a few each
}

TEST(AdamW, TheGpusOrderIssuesTheSameOperationsForAnyNumberOfParameters) {
  // 4 parameters and 40 (the same four shapes ten times): torch::optim::AdamW issues its
  // operations per parameter, the multi-tensor order once per group and step count.
  std::vector<int64_t> reference_ops, multi_ops;
  for (int copies : {1, 10}) {
    std::vector<torch::Tensor> ps;
    for (int k = 0; k < copies; ++k)
      for (auto& p : make_params(torch::kCPU)) ps.push_back(p);
    std::vector<torch::Tensor> qs = clone_params(ps);
    std::vector<torch::optim::OptimizerParamGroup> groups_p, groups_q;
    groups_p.emplace_back(ps), groups_q.emplace_back(qs);
    torch::optim::AdamW reference(std::move(groups_p), AdamWOptions(1e-2).weight_decay(kWeightDecay));
    MultiTensorAdamW multi(std::move(groups_q), AdamWOptions(1e-2).weight_decay(kWeightDecay),
                           /*multi_tensor_on_cpu=*/true);
    reference_ops.push_back(ops_of_one_step(reference, ps));
    multi_ops.push_back(ops_of_one_step(multi, qs));
    std::cout << 4 * copies << " parameters: torch::optim::AdamW " << reference_ops.back() << " operations a step, "
              << "MultiTensorAdamW " << multi_ops.back() << "\n";
  }
  // Step 3 reaches every parameter: one bucket, nine operations (decay, two per moment, sqrt,
  // the bias-correction division, + ε, the update).
  EXPECT_EQ(multi_ops[0], 9);
  EXPECT_EQ(multi_ops[1], multi_ops[0]);
  EXPECT_GE(reference_ops[0], 8 * 4);
  EXPECT_GE(reference_ops[1], 8 * 40);
}

TEST(AdamW, ClearGradsDropsThemAndAStepSkipsWhatHasNone) {
  auto ps = make_params(torch::kCPU);
  MultiTensorAdamW multi(groups_of(ps), AdamWOptions(1e-2));
  set_grads(ps, 1);
  multi.clear_grads();
  for (const auto& p : ps) EXPECT_FALSE(p.grad().defined());
  const auto before = clone_params(ps);
  multi.step();
  expect_equal(before, ps);
  EXPECT_TRUE(multi.state().empty());
  // A backward after clear_grads writes the gradients afresh.
  (ps[0].sum() * 2).backward();
  EXPECT_TRUE(torch::equal(ps[0].grad(), torch::full_like(ps[0], 2)));
}

TEST(AdamW, RejectsAmsgrad) {
  auto ps = make_params(torch::kCPU);
  EXPECT_THROW(MultiTensorAdamW({torch::optim::OptimizerParamGroup(ps)}, AdamWOptions(1e-2).amsgrad(true)),
               std::invalid_argument);
}

// fp32 on the device: its multi-tensor kernels may round an operation differently from the
// per-tensor ones and from the CPU's (fused multiply-adds, a reciprocal for a division), by at most
// an ulp each. A step rounds p twice (the decay, the update), and the update's own rounding is
// ~1e-7 of a step of size <= lr = 1e-2; six steps: at most 12 ulps of |p| (2^-23 = 1.2e-7 each).
constexpr double kFp32StepRtol = 12 * 1.2e-7;
constexpr double kFp32StepAtol = 1e-8;  // for entries near 0

// JACOND_REQUIRE_GPU (support/expect_gpu.h), the same pattern for the GPU tests of models/ (AdamWCuda,
// SoapCuda, NcclRankGroup): under JACOND_EXPECT_GPU=1 a missing GPU is a failure naming why, an
// available one nothing. Here, not in test_dense_cuda (built only with the CUDA toolkit), so that
// every build checks it.
namespace {
void require_gpu_for_a_test(bool available) { JACOND_REQUIRE_GPU(available, "no GPU for this test"); }
void require_gpu_missing() { require_gpu_for_a_test(false); }
}  // namespace

TEST(AdamW, TheGpuTestsFailUnderExpectGpuWithoutOne) {
  const jacond::ScopedEnv expect("JACOND_EXPECT_GPU", "1");
  EXPECT_FATAL_FAILURE(require_gpu_missing(), "JACOND_EXPECT_GPU=1 and no GPU for this test");
  EXPECT_NO_FATAL_FAILURE(require_gpu_for_a_test(true));
}

TEST(AdamWCuda, MatchesLibTorchsAdamWOnTheGpuAndTheCpu) {
  JACOND_REQUIRE_GPU(torch::cuda::is_available(), "no CUDA LibTorch or no GPU here (the CPU tests above run the same code)");
  auto ps = make_params(torch::kCUDA);
  auto qs = clone_params(ps);
  auto host = make_params(torch::kCPU);
  torch::optim::AdamW reference(groups_of(ps), AdamWOptions(1e-2));
  MultiTensorAdamW multi(groups_of(qs), AdamWOptions(1e-2));
  MultiTensorAdamW on_host(groups_of(host), AdamWOptions(1e-2));
  run(reference, ps, 1, 6);
  run(multi, qs, 1, 6);
  run(on_host, host, 1, 6);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(qs[i].is_cuda());
    EXPECT_TRUE(torch::allclose(qs[i].cpu(), ps[i].cpu(), kFp32StepRtol, kFp32StepAtol))
        << "parameter " << i << " vs torch::optim::AdamW";
    EXPECT_TRUE(torch::allclose(qs[i].cpu(), host[i], kFp32StepRtol, kFp32StepAtol))
        << "parameter " << i << " vs the CPU";
  }
  EXPECT_EQ(step_counts(multi), (std::multiset<int64_t>{5, 6, 6, 6}));
}

}  // namespace
