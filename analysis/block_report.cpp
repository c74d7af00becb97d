#include "analysis/block_report.h"

#include <stdexcept>

#include "analysis/jacobians.h"

namespace jacond {

ConditionReport condition_dense(const Mat& A, const std::string& name, KappaRoute route) {
  return route == KappaRoute::kSvd ? condition_svd(A, name) : condition_fast(A, name);
}

namespace {

// Per-token restriction of a token block-diagonal Jacobian to the LN complement.
std::vector<Mat> restrict_blocks(const std::vector<Mat>& blocks, const std::vector<Mat>& bases) {
  std::vector<Mat> out(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) out[i] = blocks[i] * bases[i];
  return out;
}

}  // namespace

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt) {
  w.validate();
  const BlockForward f = block_forward(w, X, skip);
  const Index n = X.rows();
  std::vector<ConditionReport> out;

  {
    const Mat K = attention_jacobian(w, f.attn, AttentionPart::kFull);
    out.push_back(condition_dense(K, "K_sa", opt.route));
    out.push_back(condition_dense(attention_jacobian(w, f.attn, AttentionPart::kB), "B_sa", opt.route));
    out.push_back(condition_dense(attention_jacobian(w, f.attn, AttentionPart::kE), "E_sa", opt.route));
  }

  if (opt.sub_blocks) {
    const bool can_restrict = w.d >= 3;
    std::vector<Mat> ln1_bases, ln2_bases;
    if (can_restrict) {
      for (Index i = 0; i < n; ++i) {
        ln1_bases.push_back(layernorm_complement_basis(f.ln1.x_hat.row(i).transpose()));
        ln2_bases.push_back(layernorm_complement_basis(f.ln2.x_hat.row(i).transpose()));
      }
    }
    const Mat Ksab = sab_jacobian(w, f);
    out.push_back(condition_dense(Ksab, "K_sab", opt.route));
    if (!sab_residual(skip) && can_restrict) {
      ConditionReport r = condition_dense(right_multiply_tokenwise(Ksab, n, ln1_bases), "K_sab", opt.route);
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
