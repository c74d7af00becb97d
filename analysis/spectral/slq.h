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
//
// Resolution, two limits:
//   * the nodes: with m < N steps, each probe's lowest node θ_1 also carries the mass of every
//     eigenvalue beneath it. The Chebyshev–Markov–Stieltjes inequalities (Gauss nodes
//     θ_1 < θ_2 < … of μ_z with weights w_k) bound it: μ_z((−∞, θ_j]) ≤ w_1 + … + w_j. So a null
//     space (E_sa has one) shows as weight at the lowest nodes, not at σ = 0. `lowest_node_sigma`
//     is the largest of the probes' lowest nodes: below it the density is not resolved (some
//     probe has no node there). `lowest_node_mass` bounds the probe-averaged measure
//     (1/P) Σ_z μ_z at or below it: per probe, the weights up to its first node above the floor
//     at or above lowest_node_sigma (every node below the floor counts: it lies at or below the
//     floor, slq_finish), summed over the probes (/P each). It bounds the estimate, not μ itself
//     (Hutchinson's error applies to it as to every SLQ number).
//   * rounding: Lanczos works on G, which squares κ; eigenvalues of G below the allowance
//     kSlqRounding·eps·‖G‖ are rounding (the Gram product's error is eps·‖G‖ times a small
//     factor, and a breakdown at the allowance moves nodes by as much), i.e. σ below
//     sqrt(kSlqRounding·eps)·σ_max ≈ 1.2e-7 σ_max. Nodes there are clamped to that floor, their
//     mass is reported separately (`mass_below_floor`), and they are left out of the density
//     (slq_density), which then integrates to 1 − mass_below_floor.
//
// Breakdown: when the Krylov space of z is exhausted (k distinct eigenvalues reached), the next
// residual is the Gram product's rounding. It is taken as breakdown when
// β ≤ kSlqRounding·eps·t, t the largest row sum of |T| so far (Gershgorin: ‖T‖ ≤ t ≤ 3‖T‖, and
// ‖T‖ ≤ ‖G‖). The quadrature on the nodes so far is then exact up to O(β) in the nodes.
// Continuing would normalise rounding into a "new" direction whose orthogonality the two passes
// cannot restore (they leave about eps·‖G‖/β of it), and give Ritz values above σ_max² (a false
// σ_max lower bound): seen at β = 1.5 eps·‖G‖ (the review's E_sa, N 128). Measured after
// exhaustion on rotated rank-deficient K (N 64 and 256, 3 probes each): β from 1e-11 to 1e-4
// eps·t; past the numerical rank of N 1024 and 2048 (σ down to 1e-6 σ_max, so G's bottom is at
// 1e3 eps·‖G‖) β stays at 5e2–5e3 eps·t: directions of G's own bottom, kept, with at most
// 1/kSlqRounding of orthogonality lost. Guarded by Slq.RotatedNullSpaceStopsAtBreakdown.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "analysis/core/types.h"

namespace jacond {

/// SLQ's rounding allowance on G, in units of eps·‖G‖ (header: breakdown and the floor).
constexpr double kSlqRounding = 64;

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
  double sigma_floor = 0;   // sqrt(kSlqRounding·eps)·σ_max estimate
  double mass_below_floor = 0;
  double sigma_max_ritz = 0;  // largest Ritz value's sqrt: a lower bound on σ_max
  double lowest_node_sigma = 0;  // the largest of the probes' lowest nodes (σ, clamped at the floor)
  double lowest_node_mass = 0;   // ≥ the probe-averaged mass at or below lowest_node_sigma (header, CMS)
  std::vector<SlqNode> nodes;
};

struct DensityPoint {
  double log10_sigma = 0, sigma = 0, density = 0;  // density per unit log10 σ
};

/// Gaussian-broadened density ρ(t) = Σ_k weight_k · N(t; log10 σ_k, width²) of the SLQ nodes above
/// the floor on a uniform grid of `points` values of t = log10 σ spanning those nodes ± 4·width. It
/// integrates (over t) to 1 − mass_below_floor up to the tails cut at the grid ends: floor nodes
/// have no σ to place them at (they would show as a peak at the floor, read as singular values).
/// Throws std::invalid_argument for points < 2, width not in (0, 10] decades, or no node above
/// the floor.
std::vector<DensityPoint> slq_density(const SlqResult& r, int points, double width);

/// Eigen-decomposition of the m×m Lanczos tridiagonal (diagonal a, off-diagonal b): appends the
/// Gauss nodes θ_k with weights (u_k[0])² / probes. Throws std::runtime_error if the
/// eigensolver reports failure (Eigen's info() != Success).
void slq_append_nodes(const Vec& a, const Vec& b, int probe, int probes, SlqResult& out);

/// Sets the floor sqrt(kSlqRounding·eps · max θ), clamps the nodes below it and sums their mass;
/// sets lowest_node_sigma and lowest_node_mass (header).
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
    double t_norm = 0;  // the largest row sum of |T| so far (header: ‖T‖ ≤ t_norm ≤ 3‖T‖)
    for (int k = 0; k < r.steps; ++k) {
      gram(Q.col(k), w);
      a(k) = Q.col(k).dot(w);
      m = k + 1;
      // Full reorthogonalisation (twice is enough, "twice is enough" of Kahan/Parlett).
      for (int pass = 0; pass < 2; ++pass) w -= Q.leftCols(k + 1) * (Q.leftCols(k + 1).transpose() * w);
      if (k + 1 == r.steps) break;
      const double beta = w.norm();
      t_norm = std::max(t_norm, std::abs(a(k)) + beta + (k > 0 ? b(k - 1) : 0.0));
      // Breakdown (header): the residual is rounding; the quadrature on the k + 1 nodes is exact to O(β).
      if (beta <= kSlqRounding * std::numeric_limits<double>::epsilon() * t_norm) break;
      b(k) = beta;
      Q.col(k + 1) = w / beta;
    }
    slq_append_nodes(a.head(m), b.head(std::max(m - 1, 0)), t, probes, r);
  }
  slq_finish(r);
  return r;
}

}  // namespace jacond
