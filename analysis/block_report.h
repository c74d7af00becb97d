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

#include <vector>

#include "analysis/block.h"
#include "analysis/condition.h"

namespace jacond {

enum class KappaRoute { kFast, kSvd };  // LU/QR + Lanczos, or the full spectrum

struct BlockReportOptions {
  KappaRoute route = KappaRoute::kFast;
  bool per_head = true;         // softmax and attention per head
  bool sub_blocks = true;       // K_sab, K_mlp, K_ffn (otherwise only K_sa, B_sa, E_sa)
};

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt = {});

/// κ of a dense matrix by the chosen route.
ConditionReport condition_dense(const Mat& A, const std::string& name, KappaRoute route);

/// Spectral norm of E_sa and σ_min of B_sa etc. are read from the reports; this finds one.
const ConditionReport& find_report(const std::vector<ConditionReport>& reports, const std::string& matrix,
                                   const std::string& space = "full", int head = -1);

}  // namespace jacond
