// Predicted memory and time of the dense routes, and the rule `auto` uses to pick one (issue #10).
//
// The rule (block, sweep, spectrum, audit, train tracking): a matrix takes a dense route when
//   bytes(route)   ≤ budget.max_bytes    (default: half of physical memory), and
//   seconds(route) ≤ budget.max_seconds  (the same per-matrix seconds the matrix-free route gets),
// so every matrix that fits, in memory and in its time budget, gets an exact κ.
// seconds = flops / (rate · threads), with the rates measured for this machine's OpenBLAS
// (2 cores; `jacond_microbench --benchmark_filter=LapackRate` re-measures them):
//   LU  (dgetrf, 2/3 N³)                         83–89 GF/s on 2 threads at N = 4 000–12 000
//   QR  (dgeqrf, 2mn² − 2/3 n³, the tall route)   counted at the LU rate
//   LDLᵀ (dsytrf_rk, N³/3)                        46 GF/s on 2 threads at N = 8 000
//   SVD (dgesdd values only, 8/3 N³; half BLAS-2) 23 GF/s on 2 threads at N = 3 000
// A faster machine only makes the prediction pessimistic (dense is then chosen less often than it
// could be, never more). The dense routes' solves and Lanczos iterations after the factorisation
// are O(N²) each and are not counted.
#pragma once

#include "analysis/core/types.h"

namespace jacond {

struct DenseCost {
  double bytes = 0;    // peak working memory of the route
  double seconds = 0;  // predicted wall-clock time
};

struct DenseBudget {
  double max_bytes = 0;      // 0: half of physical memory
  double max_seconds = 120;  // per matrix
};

/// GF/s per thread of each factorisation (header table, halved for 2 threads).
inline constexpr double kLuGflopsPerThread = 42;
inline constexpr double kLdltGflopsPerThread = 23;
inline constexpr double kSvdGflopsPerThread = 11.5;

/// Physical memory of this machine (sysconf), in bytes.
double physical_memory_bytes();

/// condition_fast on a rows × cols matrix: one LU (square) or QR (tall) of the matrix, plus one
/// copy held by the caller (K_sab keeps its full-space and ln-complement matrices together).
DenseCost fast_route_cost(Index rows, Index cols, int threads);
/// The most pieces the Schur route cuts a matrix into: its D_k hold N²/p, but its flops grow as
/// 2^p (schur_route_cost) past p = 4 and pass the full LU's ⅔ N³ at p = 7.
inline constexpr Index kMaxSchurPieces = 8;
/// Where the Schur route cuts an order × order matrix into `pieces` equal pieces: c_k = k·N/p.
inline Index schur_cut(Index order, Index pieces, Index k) { return k * order / pieces; }
/// The host's Schur route (analysis/spectral/schur_lu.h) on an order × order matrix in `pieces`
/// pieces: its D_k (8 Σ s_k² bytes: 4 N² at two pieces; its panels adapt to what memory is left)
/// and its flops at the LU rate (the D_k's LUs and the panels' solves, schur_lu.h's count: 5/12 N³
/// at two pieces, 10/27 N³ at three; the panels' products are not counted).
DenseCost schur_route_cost(Index order, int threads, Index pieces = 2);
/// The fewest pieces (2 … kMaxSchurPieces, and no more than `order`) whose D_k fit in `bytes`
/// (schur_route_cost's bytes); 0 where none do. Each piece more adds products and solves to every
/// solve of A, so the route takes the fewest that fit (analysis/report/block_report.cpp).
Index schur_pieces_within(Index order, double bytes);
/// condition_svd: dgesdd, values only.
DenseCost svd_route_cost(Index rows, Index cols, int threads);
/// K_mlp and K_ffn by their n per-token d × d blocks (token block-diagonal; condition_blockdiag):
/// forming each block (W₂ᵀ diag(gelu′) W₁ᵀ, 2d²·hidden flops, then J_LN's d × d factor, 2d³) at the
/// LU rate and its values-only SVD at the SVD rate, per matrix; the bytes of three sets of blocks
/// (K_mlp's, K_ffn's and its LayerNorm-complement restriction, 8 n d² each). Measured on 2 threads
/// at ViT-B (n 197, d 768, hidden 3072): 59 s for K_mlp, K_ffn and its restriction against 3 × 21 s
/// predicted.
DenseCost tokenwise_route_cost(Index n, Index d, Index hidden, int threads);
/// One inertia count (analysis/spectral/inertia.h): dsytrf_rk of the (rows+cols)² augmented
/// matrix, with the matrix itself kept alongside.
DenseCost inertia_count_cost(Index rows, Index cols, int threads);

/// True when `cost` is within `budget` (max_bytes = 0 means half of physical memory).
bool fits(const DenseCost& cost, const DenseBudget& budget);

}  // namespace jacond
