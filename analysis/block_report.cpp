#include "analysis/block_report.h"

#include <stdexcept>

#include "analysis/jacobians.h"
#include "analysis/operators.h"

namespace jacond {

KappaRoute parse_kappa_route(const std::string& s) {
  if (s == "auto") return KappaRoute::kAuto;
  if (s == "dense" || s == "fast") return KappaRoute::kFast;
  if (s == "svd") return KappaRoute::kSvd;
  if (s == "lanczos") return KappaRoute::kLanczos;
  throw std::invalid_argument("unknown kappa method '" + s + "' (expected auto|dense|fast|svd|lanczos)");
}

std::string to_string(KappaRoute r) {
  switch (r) {
    case KappaRoute::kFast: return "dense";
    case KappaRoute::kSvd: return "svd";
    case KappaRoute::kLanczos: return "lanczos";
    case KappaRoute::kAuto: return "auto";
  }
  return "?";
}

KappaRoute resolve_route(const BlockReportOptions& opt, Index n, Index d) {
  if (opt.route != KappaRoute::kAuto) return opt.route;
  return n * d <= opt.auto_dense_max ? KappaRoute::kFast : KappaRoute::kLanczos;
}

ConditionReport condition_dense(const Mat& A, const std::string& name, KappaRoute route) {
  switch (route) {
    case KappaRoute::kSvd: return condition_svd(A, name);
    case KappaRoute::kLanczos: return condition_lanczos(DenseMatrixOp(A), name).report;
    case KappaRoute::kAuto:
      return std::max(A.rows(), A.cols()) <= BlockReportOptions{}.auto_dense_max ? condition_fast(A, name)
                                                                                : condition_lanczos(DenseMatrixOp(A), name).report;
    case KappaRoute::kFast: break;
  }
  return condition_fast(A, name);
}

namespace {

// Per-token restriction of a token block-diagonal Jacobian to the LN complement.
std::vector<Mat> restrict_blocks(const std::vector<Mat>& blocks, const std::vector<Mat>& bases) {
  std::vector<Mat> out(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) out[i] = blocks[i] * bases[i];
  return out;
}

// κ bracket of one operator, with the caller's warm starts (read, then overwritten).
template <typename Op>
ConditionReport lanczos_report(const Op& op, const std::string& matrix, const std::string& space,
                               const BlockReportOptions& opt) {
  const std::string key = matrix + "/" + space;
  GklWarmStart start;
  if (opt.warm) {
    auto it = opt.warm->find(key);
    if (it != opt.warm->end()) start = it->second;
  }
  LanczosCondition r = condition_lanczos(op, matrix, opt.lanczos, start);
  if (opt.warm) (*opt.warm)[key] = r.warm;
  r.report.space = space;
  return r.report;
}

// The matrix-free half of block_reports: every nd × nd matrix through its operator.
void lanczos_reports(const BlockWeights& w, const BlockForward& f, SkipMode skip, const BlockReportOptions& opt,
                     std::vector<ConditionReport>& out) {
  out.push_back(lanczos_report(AttentionJacobianOp(w, f.attn, AttentionPart::kFull), "K_sa", "full", opt));
  out.push_back(lanczos_report(AttentionJacobianOp(w, f.attn, AttentionPart::kB), "B_sa", "full", opt));
  out.push_back(lanczos_report(AttentionJacobianOp(w, f.attn, AttentionPart::kE), "E_sa", "full", opt));
  if (!opt.sub_blocks) return;
  const bool can_restrict = w.d >= 3;
  const SabJacobianOp sab(w, f);
  out.push_back(lanczos_report(sab, "K_sab", "full", opt));
  if (!sab_residual(skip) && can_restrict) {
    const LayerNormComplement basis(f.ln1.x_hat);
    out.push_back(lanczos_report(LnComplementOp<SabJacobianOp>(sab, basis), "K_sab", "ln-complement", opt));
  }
  out.push_back(lanczos_report(MlpJacobianOp(w, f.mlp), "K_mlp", "full", opt));
  const FfnJacobianOp ffn(w, f);
  out.push_back(lanczos_report(ffn, "K_ffn", "full", opt));
  if (!ffn_residual(skip) && can_restrict) {
    const LayerNormComplement basis(f.ln2.x_hat);
    out.push_back(lanczos_report(LnComplementOp<FfnJacobianOp>(ffn, basis), "K_ffn", "ln-complement", opt));
  }
}

}  // namespace

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt) {
  w.validate();
  const BlockForward f = block_forward(w, X, skip);
  const Index n = X.rows();
  std::vector<ConditionReport> out;
  const KappaRoute route = resolve_route(opt, n, w.d);
  if (route == KappaRoute::kLanczos) lanczos_reports(w, f, skip, opt, out);

  if (route != KappaRoute::kLanczos) {
    const Mat K = attention_jacobian(w, f.attn, AttentionPart::kFull);
    out.push_back(condition_dense(K, "K_sa", route));
    out.push_back(condition_dense(attention_jacobian(w, f.attn, AttentionPart::kB), "B_sa", route));
    out.push_back(condition_dense(attention_jacobian(w, f.attn, AttentionPart::kE), "E_sa", route));
  }

  if (opt.sub_blocks && route != KappaRoute::kLanczos) {
    const bool can_restrict = w.d >= 3;
    std::vector<Mat> ln1_bases, ln2_bases;
    if (can_restrict) {
      for (Index i = 0; i < n; ++i) {
        ln1_bases.push_back(layernorm_complement_basis(f.ln1.x_hat.row(i).transpose()));
        ln2_bases.push_back(layernorm_complement_basis(f.ln2.x_hat.row(i).transpose()));
      }
    }
    const Mat Ksab = sab_jacobian(w, f);
    out.push_back(condition_dense(Ksab, "K_sab", route));
    if (!sab_residual(skip) && can_restrict) {
      ConditionReport r = condition_dense(right_multiply_tokenwise(Ksab, n, ln1_bases), "K_sab", route);
      r.space = "ln-complement";
      out.push_back(r);
    }
    const TokenBlockDiagonal Kmlp = mlp_jacobian(w, f.mlp);
    out.push_back(condition_blockdiag(Kmlp.blocks, "K_mlp"));
    const TokenBlockDiagonal Kffn = ffn_jacobian(w, f);
    out.push_back(condition_blockdiag(Kffn.blocks, "K_ffn"));
    if (!ffn_residual(skip) && can_restrict) {
      ConditionReport r = condition_blockdiag(restrict_blocks(Kffn.blocks, ln2_bases), "K_ffn");
      r.space = "ln-complement";
      out.push_back(r);
    }
  }

  if (opt.per_head) {
    const Mat ones_basis = ones_complement_basis(n);
    for (Index h = 0; h < w.heads; ++h) {
      const Mat& A = f.attn.A[h];
      std::vector<Mat> rows_full, rows_restricted;
      for (Index i = 0; i < n; ++i) {
        const Mat S = softmax_row_jacobian(A.row(i).transpose());
        rows_full.push_back(S);
        // S is symmetric with S·1 = 0, so 1⟂ is invariant: restrict on both sides.
        rows_restricted.push_back(ones_basis.transpose() * S * ones_basis);
      }
      ConditionReport s_full = condition_blockdiag(rows_full, "softmax");
      s_full.head = static_cast<int>(h);
      out.push_back(s_full);
      ConditionReport s_restricted = condition_blockdiag(rows_restricted, "softmax");
      s_restricted.head = static_cast<int>(h);
      s_restricted.space = "ones-complement";
      out.push_back(s_restricted);
      ConditionReport a = condition_svd(A, "attention");
      a.head = static_cast<int>(h);
      out.push_back(a);
    }
  }
  return out;
}

const ConditionReport& find_report(const std::vector<ConditionReport>& reports, const std::string& matrix,
                                   const std::string& space, int head) {
  for (const auto& r : reports)
    if (r.matrix == matrix && r.space == space && r.head == head) return r;
  throw std::out_of_range("no report for " + matrix + " on " + space);
}

}  // namespace jacond
