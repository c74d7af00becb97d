#include "models/dist/data_parallel.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>

#if JACOND_HAVE_C10D
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#else
namespace c10d {
class Reducer {};  // never made: RankGroup cannot be constructed without c10d
}
#endif

namespace jacond::models::dist {

bool parameters_finite(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (const auto& p : module.parameters())
    if (!torch::isfinite(p).all().item<bool>()) return false;
  return true;
}

std::string diverged_parameters_message(int64_t step) {
  return "the parameters hold NaN or inf after step " + std::to_string(step) +
         " (diverged; lower --lr): no checkpoint of them is written";
}

#if JACOND_HAVE_C10D

namespace {

std::vector<at::Tensor> module_state(torch::nn::Module& module) {
  std::vector<at::Tensor> state;
  for (auto& p : module.parameters()) state.push_back(p.detach());
  for (auto& b : module.buffers()) state.push_back(b.detach());
  return state;
}

// c10d::Reducer's constructor moved twice after LibTorch 1.13; the form this LibTorch has is picked
// at compile time (is_constructible; the Reducer parameter keeps the other calls uninstantiated):
//   1.13 … 2.6   (params, buckets, per-bucket size limits, group, sparse, cap, find unused,
//                 gradient as bucket view, names, first bucket cap)
//   later        the limits gone; + skip_all_reduce_unused_params, use_python_reducer (both false)
//   2.14         + bucket_bytes_cap_list (empty: the first-bucket cap, then `cap`, as before)
// Each form is DDP's default: dense gradients, every parameter used, gradients copied into buckets.
template <typename Reducer = c10d::Reducer>
std::unique_ptr<Reducer> make_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                                      std::vector<size_t> limits, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                      int64_t cap, std::unordered_map<size_t, std::string> names) {
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<size_t, std::string>;
  std::vector<bool> sparse(params.size(), false);
  const int64_t first = c10d::kDefaultFirstBucketBytes;
  if constexpr (std::is_constructible_v<Reducer, Params, Buckets, std::vector<size_t>, Group, std::vector<bool>, int64_t,
                                        bool, bool, Names, int64_t>) {
    return std::make_unique<Reducer>(std::move(params), std::move(buckets), std::move(limits), group, std::move(sparse), cap,
                                     false, false, std::move(names), first);
  } else if constexpr (std::is_constructible_v<Reducer, Params, Buckets, Group, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool, bool>) {
    return std::make_unique<Reducer>(std::move(params), std::move(buckets), group, std::move(sparse), cap, false, false,
                                     std::move(names), first, false, false);
  } else {
    return std::make_unique<Reducer>(std::move(params), std::move(buckets), group, std::move(sparse), cap, false, false,
                                     std::move(names), first, false, false, std::vector<int64_t>{});
  }
}

}  // namespace

void broadcast_module_state(torch::nn::Module& module, RankGroup& group) {
  torch::NoGradGuard no_grad;
  const auto state = module_state(module);
  if (state.empty()) return;
  run_collective(group.rank(), "broadcast of the model", [&] {
    c10d::broadcast_coalesced(group.process_group(), state, /*buffer_size=*/256 << 20, /*rank=*/0);
  });
}

void check_replicas_agree(torch::nn::Module& module, RankGroup& group, int64_t step) {
  torch::NoGradGuard no_grad;
  double sum = 0, sum_sq = 0;
  for (const auto& p : module.parameters()) {
    const auto p64 = p.detach().to(torch::kFloat64);
    sum += p64.sum().item<double>();
    sum_sq += p64.square().sum().item<double>();
  }
  auto mine = torch::tensor({sum, sum_sq}, torch::kFloat64);
  auto rank0 = mine.clone();
  group.broadcast(rank0, 0);
  // One all-reduce for both verdicts, so every rank throws the same error (none waits alone).
  const std::vector<double> counts =
      group.allreduce_sum({parameters_finite(module) ? 0.0 : 1.0, rank0.equal(mine) ? 0.0 : 1.0});
  if (counts[0] > 0) throw std::runtime_error(diverged_parameters_message(step));
  const double differs = counts[1];
  if (differs > 0)
    throw std::runtime_error("step " + std::to_string(step) + ": the parameters of " +
                             std::to_string(static_cast<int64_t>(differs)) +
                             " rank(s) differ from rank 0's (a replica drifted: non-deterministic kernels or mixed hardware)");
}

GradientAverager::GradientAverager(torch::nn::Module& module, RankGroup& group, int64_t bucket_bytes)
    : module_(module), group_(group) {
  std::vector<at::Tensor> params;
  std::unordered_map<size_t, std::string> names;
  for (const auto& p : module.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    names[params.size()] = p.key();
    params.push_back(p.value());
  }
  if (params.empty()) throw std::invalid_argument("data parallel: the model has no trainable parameters");
  // DDP's bucketing: a small first bucket (its all-reduce starts early), then bucket_bytes; the
  // buckets reversed because gradients arrive from the last layer to the first.
  const std::vector<size_t> limits{static_cast<size_t>(c10d::kDefaultFirstBucketBytes), static_cast<size_t>(bucket_bytes)};
  auto [buckets, bucket_limits] = c10d::compute_bucket_assignment_by_size(params, limits, std::vector<bool>(params.size(), false));
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(bucket_limits.begin(), bucket_limits.end());
  run_collective(group.rank(), "setting up the gradient all-reduce", [&] {
    reducer_ = make_reducer(params, std::move(buckets), std::move(bucket_limits), group.process_group(), bucket_bytes,
                            std::move(names));
  });
}

GradientAverager::~GradientAverager() = default;

void GradientAverager::before_forward() {
  reducer_->prepare_for_forward();
  run_collective(group_.rank(), "rebuilding the gradient buckets", [&] { reducer_->rebuild_buckets(); });
  std::vector<at::Tensor> buffers;
  for (auto& b : module_.buffers()) buffers.push_back(b.detach());
  if (!buffers.empty())
    run_collective(group_.rank(), "broadcast of the buffers", [&] {
      c10d::broadcast_coalesced(group_.process_group(), buffers, /*buffer_size=*/256 << 20, /*rank=*/0);
    });
}

void GradientAverager::backward(const torch::Tensor& loss) {
  reducer_->prepare_for_backward({});
  run_collective(group_.rank(), "the backward pass's gradient all-reduce", [&] { loss.backward(); });
}

#else  // no c10d: unreachable, since no RankGroup exists (process_group.cpp)

void broadcast_module_state(torch::nn::Module&, RankGroup&) {}
void check_replicas_agree(torch::nn::Module&, RankGroup&, int64_t) {}
GradientAverager::GradientAverager(torch::nn::Module& module, RankGroup& group, int64_t) : module_(module), group_(group) {}
GradientAverager::~GradientAverager() = default;
void GradientAverager::before_forward() {}
void GradientAverager::backward(const torch::Tensor& loss) { loss.backward(); }

#endif

}  // namespace jacond::models::dist
