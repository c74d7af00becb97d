// All condition reports of one block at one input: the matrices of `jacond block`.
//
//   K_sa, B_sa, E_sa  bare attention at its input LN1(X) and its Prop. 2 split (nd × nd)
//   K_sab             X -> SA(LN1 X) (+ X)                                     (nd × nd)
//   K_mlp             bare MLP at its input LN2(X1)        (token block-diagonal)
//   K_ffn             X1 -> MLP(LN2 X1) (+ X1)             (token block-diagonal)
//   softmax           ∂vec A_h/∂vec M_h per head, block diagonal over rows (n² × n²)
//   attention         the attention map A_h per head (n × n)
//
// Without a residual, K_sab and K_ffn inherit LayerNorm's structural nullspace (span{1} per
// token exactly, span{x̂} per token up to eps/(var+eps)): they are reported over the full space
// (status singular) and again restricted to the complement of that nullspace, with
// space = "ln-complement". The softmax Jacobian always kills 1: it is reported over the full
// space and on space = "ones-complement".
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/gkl.h"

namespace jacond {

/// How κ of the nd × nd matrices is computed:
///   kFast     dense, exact: LU/QR + Lanczos (condition_fast; K_mlp/K_ffn per-token SVDs)
///   kSvd      dense, exact: the full spectrum
///   kLanczos  matrix-free certified bracket (analysis/spectral/gkl.h) on the operators of
///             analysis/operators/operators.h: K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn (and ln-complements)
///   kAuto     kFast when the matrix fits the dense route (auto_prefers_dense), else kLanczos
/// Softmax (n² × n², block diagonal over rows) and attention (n × n) per head stay dense.
enum class KappaRoute { kFast, kSvd, kLanczos, kAuto };

/// The one "auto" threshold of jacond (block, sweep, spectrum, train tracking, audit): a matrix
/// whose larger side is at most this many rows/columns goes to the dense route. For the nd × nd
/// block Jacobians the side is n·d. 4096² doubles are 134 MB and an LU takes ~1 s on 2 cores.
inline constexpr Index kAutoDenseMaxSide = 4096;
/// The auto rule: dense when max(rows, cols) ≤ max_side.
inline bool auto_prefers_dense(Index rows, Index cols, Index max_side = kAutoDenseMaxSide) {
  return std::max(rows, cols) <= max_side;
}

/// The matrices block_reports computes (the `matrix` column), in report order:
/// K_sa B_sa E_sa K_sab K_mlp K_ffn softmax attention.
const std::vector<std::string>& block_matrix_names();

/// Parses a comma list such as "K_sab,K_ffn,softmax" into names, each checked against
/// `valid` (std::invalid_argument naming the first unknown one and listing the valid ones);
/// "" or "all" gives {} (= every matrix).
std::vector<std::string> parse_matrix_names(const std::string& spec, const std::vector<std::string>& valid);

/// "auto" | "dense" (= "fast") | "fast" | "svd" | "lanczos"; anything else throws
/// std::invalid_argument naming the value.
KappaRoute parse_kappa_route(const std::string& s);
std::string to_string(KappaRoute r);

struct BlockReportOptions {
  KappaRoute route = KappaRoute::kFast;
  /// The matrices to compute (names of block_matrix_names()); empty: all. A matrix not asked
  /// for is never assembled, applied or solved.
  std::vector<std::string> matrices;
  Index auto_dense_max = kAutoDenseMaxSide;  // kAuto: dense when n·d ≤ this
  GklOptions lanczos;           // kLanczos: per-matrix budget (max_seconds, max_products), tolerance
  /// kLanczos warm starts, keyed "matrix/space" (e.g. "K_sab/full"): read if present, then
  /// overwritten with this call's vectors, so a sweep or a series of checkpoints can chain.
  std::map<std::string, GklWarmStart>* warm = nullptr;
};

/// True when `matrix` is among opt.matrices (or opt.matrices is empty).
bool wants(const BlockReportOptions& opt, const std::string& matrix);

/// The route block_reports takes for an n × d input (resolves kAuto).
KappaRoute resolve_route(const BlockReportOptions& opt, Index n, Index d);

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt = {});

/// κ of a dense matrix by the chosen route (kLanczos runs GKL on the dense matrix; kAuto by size).
ConditionReport condition_dense(Mat A, const std::string& name, KappaRoute route);

/// Spectral norm of E_sa and σ_min of B_sa etc. are read from the reports; this finds one.
const ConditionReport& find_report(const std::vector<ConditionReport>& reports, const std::string& matrix,
                                   const std::string& space = "full", int head = -1);

}  // namespace jacond
