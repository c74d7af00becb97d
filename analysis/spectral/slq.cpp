#include "analysis/spectral/slq.h"

#include <Eigen/Eigenvalues>
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
  const double floor_lambda = std::numeric_limits<double>::epsilon() * theta_max;
  out.sigma_max_ritz = std::sqrt(theta_max);
  out.sigma_floor = std::sqrt(floor_lambda);
  out.mass_below_floor = 0;
  for (SlqNode& n : out.nodes) {
    n.below_floor = n.theta <= floor_lambda;
    n.sigma = n.below_floor ? out.sigma_floor : std::sqrt(n.theta);
    if (n.below_floor) out.mass_below_floor += n.weight;
  }
}

std::vector<DensityPoint> slq_density(const SlqResult& r, int points, double width) {
  if (points < 2) throw std::invalid_argument("density grid needs at least 2 points, got " + std::to_string(points));
  if (!(width > 0)) throw std::invalid_argument("density width must be positive, got " + std::to_string(width));
  if (r.nodes.empty() || !(r.sigma_max_ritz > 0)) throw std::invalid_argument("no SLQ nodes with positive sigma");
  double lo = std::log10(r.sigma_max_ritz), hi = lo;
  for (const SlqNode& n : r.nodes) lo = std::min(lo, std::log10(n.sigma));
  lo -= 4 * width;
  hi += 4 * width;
  const double norm = 1.0 / (width * std::sqrt(2.0 * M_PI));
  std::vector<DensityPoint> grid(points);
  for (int g = 0; g < points; ++g) {
    DensityPoint& p = grid[g];
    p.log10_sigma = lo + (hi - lo) * g / (points - 1);
    p.sigma = std::pow(10.0, p.log10_sigma);
    for (const SlqNode& n : r.nodes) {
      const double z = (p.log10_sigma - std::log10(n.sigma)) / width;
      p.density += n.weight * norm * std::exp(-0.5 * z * z);
    }
  }
  return grid;
}

}  // namespace jacond
