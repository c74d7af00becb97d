// Stacks of initialized blocks and Gaussian input batches for the network-level claims
// (`jacond verify eq6|eq89`, `jacond spectrum --matrix J_l|Jhat_l`). No LibTorch in this header.
#pragma once

#include <string>
#include <vector>

#include "analysis/operators/network.h"

namespace jacond::cli {

struct StackConfig {
  std::string init = "timm";          // timm | ours | mimetic (docs/design.md §3)
  double alpha = 2.0, beta = 0.6, c = 3.0;  // `ours` (paper ViT-B values)
  std::string mlp_init = "default";   // default (dks for ours, else timm) | timm | dks
  Index depth = 2, d = 8, heads = 2, hidden = 16;
  double logit_scale = 0.0;           // 0 = 1/sqrt(d_h)
  SkipMode skip = SkipMode::kFull;    // the same mode for every block
  uint64_t seed = 0;
};

/// L blocks from the init; block ℓ uses seed mix(seed, ℓ) so blocks differ.
Network make_stack(const StackConfig& cfg);

/// m Gaussian token matrices X^(s) ∈ R^{n×d}, entries N(0, 1), from a seed.
std::vector<Mat> gaussian_batch(Index m, Index n, Index d, uint64_t seed);

/// Seed of block ℓ / sample s (splitmix64 of (seed, k)).
uint64_t mix_seed(uint64_t seed, uint64_t k);

}  // namespace jacond::cli
