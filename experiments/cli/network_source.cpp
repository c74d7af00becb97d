#include "experiments/cli/network_source.h"

#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"

namespace jacond::cli {

uint64_t mix_seed(uint64_t seed, uint64_t k) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (k + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Network make_stack(const StackConfig& cfg) {
  if (cfg.depth < 1) throw std::invalid_argument("depth must be >= 1, got " + std::to_string(cfg.depth));
  Network net;
  for (Index l = 0; l < cfg.depth; ++l) {
    net.blocks.push_back(init_weights(cfg.init, cfg.alpha, cfg.beta, cfg.c, cfg.mlp_init, mix_seed(cfg.seed, l), cfg.d,
                                      cfg.heads, cfg.hidden, cfg.logit_scale));
    net.skips.push_back(cfg.skip);
  }
  return net;
}

std::vector<Mat> gaussian_batch(Index m, Index n, Index d, uint64_t seed) {
  std::vector<Mat> X;
  for (Index s = 0; s < m; ++s) X.push_back(gaussian_tokens(n, d, mix_seed(seed ^ 0x5eedULL, s)));
  return X;
}

}  // namespace jacond::cli
