// Links jacond::analysis from an installed tree and checks two answers known in closed form:
//   κ(diag(1, 2, 8)) = 8 by the dense SVD route;
//   a bare attention block whose logits are all zero (W^Q = 0) has A = 11ᵀ/n, so
//   K_sa = Σ_h (W^V_h W^O_h)ᵀ ⊗ 11ᵀ/n has rank d: block_reports must call it singular.
#include <cmath>
#include <cstdio>

#include "analysis/report/block_report.h"
#include "analysis/spectral/condition.h"

int main() {
  using namespace jacond;
  Mat D = Mat::Zero(3, 3);
  D.diagonal() << 1.0, 2.0, 8.0;
  const ConditionReport r = condition_svd(D, "diag");
  if (r.status != Status::kExact || std::abs(r.kappa - 8.0) > 1e-12) {
    std::fprintf(stderr, "consumer: kappa(diag(1,2,8)) = %g (%s), expected 8 (exact)\n", r.kappa,
                 to_string(r.status).c_str());
    return 1;
  }
  const Index n = 4, d = 4;
  BlockWeights w = BlockWeights::zeros(d, 1, 4 * d);
  w.Wv = Mat::Identity(d, d);
  w.Wo = Mat::Identity(d, d);
  w.ln1_gamma = w.ln2_gamma = Vec::Ones(d);
  Mat X = Mat::Zero(n, d);
  for (Index i = 0; i < n; ++i) X(i, i) = 1.0;
  BlockReportOptions opt;
  opt.matrices = {"K_sa"};
  const auto reports = block_reports(w, X, SkipMode::kNone, opt);
  if (reports.size() != 1 || reports[0].matrix != "K_sa" || reports[0].status != Status::kSingular) {
    std::fprintf(stderr, "consumer: expected one singular K_sa report, got %zu (first: %s)\n", reports.size(),
                 reports.empty() ? "none" : to_string(reports[0].status).c_str());
    return 1;
  }
  std::printf("consumer: jacond::analysis linked; kappa(diag(1,2,8)) = 8, uniform-attention K_sa singular\n");
  return 0;
}
