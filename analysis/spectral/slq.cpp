#include "analysis/spectral/slq.h"

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace jacond {

void slq_append_nodes(const Vec& a, const Vec& b, int probe, int probes, SlqResult& out) {
  const Index m = a.size();
  Mat T = Mat::Zero(m, m);
  T.diagonal() = a;
  if (m > 1) {
    T.diagonal(1) = b;
    T.diagonal(-1) = b;
  }
  // Gauss quadrature: nodes = eigenvalues of T, weights = squared first components of its eigenvectors.
  const Eigen::SelfAdjointEigenSolver<Mat> es(T);
  if (es.info() != Eigen::Success)
    throw std::runtime_error("slq: eigen-decomposition of the " + std::to_string(m) + "x" + std::to_string(m) +
                             " Lanczos tridiagonal failed");
  for (Index k = 0; k < m; ++k) {
    SlqNode node;
    node.probe = probe;
    node.theta = es.eigenvalues()(k);
    node.weight = es.eigenvectors()(0, k) * es.eigenvectors()(0, k) / probes;
    out.nodes.push_back(node);
  }
}

void slq_finish(SlqResult& out) {
  double theta_max = 0;
  for (const SlqNode& n : out.nodes) theta_max = std::max(theta_max, n.theta);
  const double floor_lambda = kSlqRounding * std::numeric_limits<double>::epsilon() * theta_max;
  out.sigma_max_ritz = std::sqrt(theta_max);
  out.sigma_floor = std::sqrt(floor_lambda);
  out.mass_below_floor = 0;
  std::map<int, std::vector<const SlqNode*>> by_probe;
  for (SlqNode& n : out.nodes) {
    n.below_floor = n.theta <= floor_lambda;
    n.sigma = n.below_floor ? out.sigma_floor : std::sqrt(n.theta);
    if (n.below_floor) out.mass_below_floor += n.weight;
    by_probe[n.probe].push_back(&n);
  }
  // lowest_node_sigma: the largest of the probes' lowest nodes. lowest_node_mass: per probe, the
  // weights of its nodes up to its first at or above that σ (Chebyshev–Markov–Stieltjes: they
  // bound μ_z at or below it), summed over the probes (weights carry their 1/P). A node below the
  // floor never ends the sum: its σ is clamped to the floor, not placed there (its θ lies anywhere
  // in [0, floor²]), so when every probe's lowest node is below the floor (lowest_node_sigma = the
  // floor) all of them lie at or below it and the sum runs to the first node above the floor. The
  // sum once stopped at the first floor node and dropped the others: 3.7e-30 for a mass of 1/6 (a
  // review's 10-dimensional null space in N = 60). Guarded by Slq.EveryFloorNodeCountsInTheLowestMass.
  out.lowest_node_sigma = out.lowest_node_mass = 0;
  for (auto& [probe, nodes] : by_probe) {
    std::sort(nodes.begin(), nodes.end(), [](const SlqNode* a, const SlqNode* b) { return a->theta < b->theta; });
    out.lowest_node_sigma = std::max(out.lowest_node_sigma, nodes.front()->sigma);
  }
  for (const auto& [probe, nodes] : by_probe)
    for (const SlqNode* n : nodes) {
      out.lowest_node_mass += n->weight;
      if (!n->below_floor && n->sigma >= out.lowest_node_sigma) break;
    }
}

std::vector<DensityPoint> slq_density(const SlqResult& r, int points, double width) {
  if (points < 2) throw std::invalid_argument("density grid needs at least 2 points, got " + std::to_string(points));
  if (!(width > 0 && width <= 10))
    throw std::invalid_argument("density width must be in (0, 10] decades of sigma, got " + std::to_string(width));
  const auto placed = [](const SlqNode& n) { return !n.below_floor; };
  if (!(r.sigma_max_ritz > 0) || std::none_of(r.nodes.begin(), r.nodes.end(), placed))
    throw std::invalid_argument("no SLQ node above the floor: the operator is zero to rounding");
  double lo = std::log10(r.sigma_max_ritz), hi = lo;
  for (const SlqNode& n : r.nodes)
    if (placed(n)) lo = std::min(lo, std::log10(n.sigma));
  lo -= 4 * width;
  hi += 4 * width;
  const double norm = 1.0 / (width * std::sqrt(2.0 * M_PI));
  std::vector<DensityPoint> grid(points);
  for (int g = 0; g < points; ++g) {
    DensityPoint& p = grid[g];
    p.log10_sigma = lo + (hi - lo) * g / (points - 1);
    p.sigma = std::pow(10.0, p.log10_sigma);
    for (const SlqNode& n : r.nodes) {
      if (!placed(n)) continue;
      const double z = (p.log10_sigma - std::log10(n.sigma)) / width;
      p.density += n.weight * norm * std::exp(-0.5 * z * z);
    }
  }
  return grid;
}

}  // namespace jacond
