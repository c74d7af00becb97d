#include "analysis/spectral/dense_cost.h"

#include <unistd.h>

#include <algorithm>

namespace jacond {

namespace {
constexpr double kDouble = sizeof(double);
double seconds_for(double flops, double gflops_per_thread, int threads) {
  return flops / (gflops_per_thread * 1e9 * std::max(1, threads));
}
}  // namespace

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

DenseCost fast_route_cost(Index rows, Index cols, int threads) {
  const double m = static_cast<double>(std::max(rows, cols)), n = static_cast<double>(std::min(rows, cols));
  const double flops = m == n ? 2.0 / 3.0 * n * n * n : 2.0 * m * n * n - 2.0 / 3.0 * n * n * n;
  return {2.0 * kDouble * m * n, seconds_for(flops, kLuGflopsPerThread, threads)};
}

DenseCost schur_route_cost(Index order, int threads, Index pieces) {
  // Piece k's D_k: s_k columns each solved with A^(k) (T_k−1 flops a column), then its LU.
  double bytes = 0, flops = 0, leading_solve = 0;  // leading_solve: T_k−1, the flops of one solve with A^(k)
  for (Index k = 0; k < pieces; ++k) {
    const double s = static_cast<double>(schur_cut(order, pieces, k + 1) - schur_cut(order, pieces, k));
    bytes += kDouble * s * s;
    flops += s * leading_solve + 2.0 / 3.0 * s * s * s;
    leading_solve = 2.0 * leading_solve + 2.0 * s * s;  // (1): two solves with A^(k), one with D_k
  }
  return {bytes, seconds_for(flops, kLuGflopsPerThread, threads)};
}

Index schur_pieces_within(Index order, double bytes) {
  for (Index pieces = 2; pieces <= std::min(kMaxSchurPieces, order); ++pieces)
    if (schur_route_cost(order, 1, pieces).bytes <= bytes) return pieces;
  return 0;
}

DenseCost svd_route_cost(Index rows, Index cols, int threads) {
  const double m = static_cast<double>(std::max(rows, cols)), n = static_cast<double>(std::min(rows, cols));
  return {2.0 * kDouble * m * n, seconds_for(4.0 * m * n * n - 4.0 / 3.0 * n * n * n, kSvdGflopsPerThread, threads)};
}

DenseCost tokenwise_route_cost(Index n, Index d, Index hidden, int threads) {
  const double tokens = static_cast<double>(n), w = static_cast<double>(d), h = static_cast<double>(hidden);
  const double forming = tokens * (2.0 * w * w * h + 2.0 * w * w * w);
  return {3.0 * kDouble * tokens * w * w, seconds_for(forming, kLuGflopsPerThread, threads) +
                                              tokens * svd_route_cost(d, d, threads).seconds};
}

DenseCost inertia_count_cost(Index rows, Index cols, int threads) {
  const double N = static_cast<double>(rows + cols);
  return {kDouble * (N * N + static_cast<double>(rows) * static_cast<double>(cols)),
          seconds_for(N * N * N / 3.0, kLdltGflopsPerThread, threads)};
}

bool fits(const DenseCost& cost, const DenseBudget& budget) {
  const double max_bytes = budget.max_bytes > 0 ? budget.max_bytes : 0.5 * physical_memory_bytes();
  return cost.bytes <= max_bytes && cost.seconds <= budget.max_seconds;
}

}  // namespace jacond
