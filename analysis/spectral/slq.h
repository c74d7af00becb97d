// Stochastic Lanczos quadrature (SLQ) for the singular-value density of a matrix-free operator
// (Ubaru, Chen & Saad 2017; Lin, Saad & Yang 2016).
//
// For K ∈ R^{r×c} let G = KᵀK when c ≤ r, else G = KKᵀ (the smaller Gram matrix; both have the
// same nonzero eigenvalues σ_i²), N = min(r, c). The spectral measure μ = (1/N) Σ_i δ(λ − σ_i²)
// satisfies ∫ f dμ = tr f(G)/N = E_z[zᵀ f(G) z]/N for Rademacher z (Hutchinson). For each probe
// z, m Lanczos steps on G from q_1 = z/‖z‖ (full reorthogonalisation) give a tridiagonal T_m =
// Σ_k θ_k u_k u_kᵀ and the Gauss quadrature zᵀ f(G) z ≈ ‖z‖² Σ_k (u_k[0])² f(θ_k), ‖z‖² = N.
// So μ ≈ (1/P) Σ_probes Σ_k w_k δ(λ − θ_k), w_k = (u_k[0])², Σ_k w_k = 1 per probe.
//
// What it is: per probe the quadrature reproduces the moments ∫ λ^j dμ_z exactly for j ≤ 2m − 1;
// the density is a smoothed estimate at the scale of the node spacing, so a thin tail of small
// singular values is lumped into the outermost nodes (compare with `--method dense` when it fits).
// Resolution: Lanczos works on G, which squares κ; eigenvalues below ≈ eps·‖G‖ are not resolved,
// i.e. σ below sqrt(eps)·σ_max ≈ 1.5e-8 σ_max. Nodes there are clamped to that floor and their
// mass is reported separately (`mass_below_floor`), never placed at a made-up σ.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "analysis/core/types.h"

namespace jacond {

struct SlqNode {
  int probe = 0;
  double theta = 0;   // Ritz value θ_k of G
  double sigma = 0;   // sqrt(θ_k), clamped at the floor
  double weight = 0;  // w_k / P (all nodes' weights sum to 1)
  bool below_floor = false;
};

struct SlqResult {
  Index N = 0;              // dimension of the Gram matrix used
  bool gram_is_ktk = true;  // G = KᵀK (true) or KKᵀ (false)
  int probes = 0, steps = 0;
  Index products = 0;       // products with K plus with Kᵀ
  double sigma_floor = 0;   // sqrt(eps)·σ_max estimate
  double mass_below_floor = 0;
  double sigma_max_ritz = 0;  // largest Ritz value's sqrt: a lower bound on σ_max
  std::vector<SlqNode> nodes;
};

struct DensityPoint {
  double log10_sigma = 0, sigma = 0, density = 0;  // density per unit log10 σ
};

/// Gaussian-broadened density ρ(t) = Σ_k weight_k · N(t; log10 σ_k, width²) of the SLQ nodes on a
/// uniform grid of `points` values of t = log10 σ spanning the nodes ± 4·width. It integrates
/// (over t) to 1 up to the tails cut at the grid ends; floor nodes sit at the floor.
/// Throws std::invalid_argument for points < 2 or width <= 0.
std::vector<DensityPoint> slq_density(const SlqResult& r, int points, double width);

/// Eigen-decomposition of the m×m Lanczos tridiagonal (diagonal a, off-diagonal b): appends the
/// Gauss nodes θ_k with weights (u_k[0])² / probes. Throws std::runtime_error if the
/// eigensolver reports failure (Eigen's info() != Success).
void slq_append_nodes(const Vec& a, const Vec& b, int probe, int probes, SlqResult& out);

/// Sets the floor sqrt(eps · max θ), clamps the nodes below it and sums their mass.
void slq_finish(SlqResult& out);

/// SLQ on an operator with rows(), cols(), perform_op, perform_op_transpose (docs/design.md §5).
template <typename Op>
SlqResult slq(const Op& op, int probes, int steps, uint64_t seed) {
  SlqResult r;
  const Index rows = op.rows(), cols = op.cols();
  r.gram_is_ktk = cols <= rows;
  r.N = std::min(rows, cols);
  r.probes = probes;
  r.steps = static_cast<int>(std::min<Index>(steps, r.N));
  Vec tmp(std::max(rows, cols));
  // y = G x. NaN or inf from the operator is its failure, not a spectrum: thrown.
  auto gram = [&](const Vec& x, Vec& y) {
    if (r.gram_is_ktk) {
      op.perform_op(x.data(), tmp.data());
      op.perform_op_transpose(tmp.data(), y.data());
    } else {
      op.perform_op_transpose(x.data(), tmp.data());
      op.perform_op(tmp.data(), y.data());
    }
    r.products += 2;
    if (!y.allFinite()) throw std::runtime_error("slq: the operator returned NaN or inf");
  };
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution coin(0.5);
  for (int t = 0; t < probes; ++t) {
    Mat Q(r.N, r.steps);
    Vec z(r.N);
    for (Index i = 0; i < r.N; ++i) z(i) = coin(rng) ? 1.0 : -1.0;
    Q.col(0) = z / z.norm();
    Vec a(r.steps), b(std::max(r.steps - 1, 0));
    Vec w(r.N);
    int m = 0;
    for (int k = 0; k < r.steps; ++k) {
      gram(Q.col(k), w);
      a(k) = Q.col(k).dot(w);
      m = k + 1;
      // Full reorthogonalisation (twice is enough, "twice is enough" of Kahan/Parlett).
      for (int pass = 0; pass < 2; ++pass) w -= Q.leftCols(k + 1) * (Q.leftCols(k + 1).transpose() * w);
      if (k + 1 == r.steps) break;
      const double beta = w.norm();
      if (beta <= 1e-14 * std::max(std::abs(a(k)), 1e-300)) break;  // invariant subspace: quadrature is exact
      b(k) = beta;
      Q.col(k + 1) = w / beta;
    }
    slq_append_nodes(a.head(m), b.head(std::max(m - 1, 0)), t, probes, r);
  }
  slq_finish(r);
  return r;
}

}  // namespace jacond
