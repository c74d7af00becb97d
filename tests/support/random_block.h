// Random block weights and tokens for analysis tests (no LibTorch): Gaussian weights of
// variance 1/d so logits and activations are O(1), non-zero biases, non-unit LayerNorm affine.
#pragma once

#include <random>

#include "analysis/jacobians/block.h"

namespace jacond::test {

inline Mat gaussian(Index rows, Index cols, double std, std::mt19937_64& rng) {
  std::normal_distribution<double> N(0.0, std);
  Mat M(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) M(i, j) = N(rng);
  return M;
}

inline BlockWeights random_block(Index d, Index heads, Index hidden, uint64_t seed, double logit_scale = 0.0) {
  std::mt19937_64 rng(seed);
  BlockWeights w = BlockWeights::zeros(d, heads, hidden);
  w.logit_scale = logit_scale;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  w.Wq = gaussian(d, d, 1.5 * s, rng);
  w.Wk = gaussian(d, d, 1.5 * s, rng);
  w.Wv = gaussian(d, d, s, rng);
  w.Wo = gaussian(d, d, s, rng);
  w.bq = gaussian(d, 1, 0.3, rng);
  w.bk = gaussian(d, 1, 0.3, rng);
  w.bv = gaussian(d, 1, 0.3, rng);
  w.bo = gaussian(d, 1, 0.3, rng);
  w.ln1_gamma = Vec::Ones(d) + gaussian(d, 1, 0.2, rng);
  w.ln1_beta = gaussian(d, 1, 0.2, rng);
  w.ln2_gamma = Vec::Ones(d) + gaussian(d, 1, 0.2, rng);
  w.ln2_beta = gaussian(d, 1, 0.2, rng);
  w.W1 = gaussian(d, hidden, s, rng);
  w.b1 = gaussian(hidden, 1, 0.3, rng);
  w.W2 = gaussian(hidden, d, 1.0 / std::sqrt(static_cast<double>(hidden)), rng);
  w.b2 = gaussian(d, 1, 0.3, rng);
  return w;
}

inline Mat random_tokens(Index n, Index d, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  return gaussian(n, d, 1.0, rng);
}

inline double rel_error(const Mat& got, const Mat& want) {
  return (got - want).norm() / std::max(want.norm(), 1e-300);
}

}  // namespace jacond::test
