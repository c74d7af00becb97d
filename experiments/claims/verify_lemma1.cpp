// Lemma 1 (App. A.2.2): with W^Q W^Kᵀ = αZ + βI, "‖∂vec A/∂vec X‖₂ = O(α e^{−β})".
//
// The proof bounds ‖∂vec A/∂vec X‖₂ by ‖∂vec A/∂vec M‖₂ (Eq. 21) and then shows the softmax
// Jacobian is small when rows are diagonally dominant (Eqs. 22–29). Eq. 21 drops the factor
// ‖∂vec M/∂vec X‖₂, which grows with ‖W^Q W^Kᵀ‖ ≈ β. So we check what the proof establishes and
// report the rest:
//  * With γ = min_i (M_ii − max_{j≠i} M_ij) and ε_i = 1 − A_ii ≤ (n−1)e^{−γ}, each softmax row
//    Jacobian J_i = diag(p) − ppᵀ has ‖J_i‖₂ ≤ max_k Σ_l |J_i[k,l]| = max_k 2p_k(1 − p_k) ≤ 2ε_i,
//    hence  ‖∂vec A/∂vec M‖₂ = max_i ‖J_i‖₂ ≤ 2(n−1)e^{−γ}        (explicit constant; checked)
//  * ‖∂vec A/∂vec M‖₂ decays exponentially in β (fitted slope on the tail; checked < 0 clearly)
//  * ‖∂vec A/∂vec X‖₂ itself (dense SVD of the n² × nd matrix of analysis/jacobians/jacobians.h) is
//    reported: it carries the extra ‖∂M/∂X‖ ∝ β and decays only once e^{−γ} wins.
// Setting: one head (W^Q W^Kᵀ = T exactly), no biases, tokens normalised per row as after a
// LayerNorm (‖x_i‖² = d, the input a pre-norm block sees), logits M = s X T Xᵀ with s = 1/d
// so that the diagonal logits equal β·(1 + O(α/√d)) and γ ≈ β(1 − max_j ⟨x_i, x_j⟩/d).
#include <cmath>
#include <iostream>
#include <random>

#include "analysis/spectral/condition.h"
#include "analysis/jacobians/jacobians.h"
#include "experiments/cli/cli_common.h"
#include "experiments/claims/verify.h"
#include "models/track/bridge.h"
#include "models/init/init.h"

namespace jacond::cli {

namespace {
double slope(const std::vector<double>& x, const std::vector<double>& logy, double from) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    if (x[k] < from) continue;
    sx += x[k], sy += logy[k], sxx += x[k] * x[k], sxy += x[k] * logy[k], ++m;
  }
  return (m * sxy - sx * sy) / (m * sxx - sx * sx);
}
}  // namespace

bool verify_lemma1(const VerifyOptions& opt, Verifier& v) {
  const Index n = 16, d = 32;
  const double alpha = 2.0;
  const int seeds = std::max(5, opt.seeds / 20);
  std::cout << "Lemma 1: softmax Jacobian under W^Q W^K^T = alpha Z + beta I; n = " << n << ", d = " << d
            << ", one head, alpha = " << alpha << ", LayerNorm-normalised tokens, logit scale 1/d, " << seeds
            << " seeds per beta\n";
  std::vector<double> betas, log_dAdM, log_dAdX, gap_over_beta;
  int bound_cases = 0, bound_ok = 0;
  for (double beta = 0.0; beta <= 12.0 + 1e-9; beta += 1.0) {
    double sum_m = 0, sum_x = 0, sum_gap = 0;
    for (int s = 0; s < seeds; ++s) {
      models::InitConfig cfg;
      cfg.scheme = models::InitScheme::kOurs;
      cfg.alpha = alpha;
      cfg.beta = beta;
      cfg.seed = opt.seed + 1000 * s + 7;
      models::TensorMap t;
      models::init_block(t, 0, d, 1, 4 * d, cfg);
      const BlockWeights w = models::block_from_timm(t, 0, 1, 1.0 / d);
      const Mat X = layernorm_forward(gaussian_tokens(n, d, cfg.seed + 1), Vec::Ones(d), Vec::Zero(d), 1e-12).y;
      const AttentionCache c = attention_forward(w, X);
      const Mat M = (1.0 / d) * c.Q * c.K.transpose();
      double gamma = INFINITY, dAdM = 0;
      for (Index i = 0; i < n; ++i) {
        double off = -INFINITY;
        for (Index j = 0; j < n; ++j)
          if (j != i) off = std::max(off, M(i, j));
        gamma = std::min(gamma, M(i, i) - off);
        dAdM = std::max(dAdM, singular_values(softmax_row_jacobian(c.A[0].row(i).transpose())).maxCoeff());
      }
      if (gamma > 0) {
        ++bound_cases;
        if (dAdM <= 2.0 * (n - 1) * std::exp(-gamma) * (1 + 1e-12)) ++bound_ok;
      }
      sum_m += std::log(dAdM);
      sum_x += std::log(singular_values(attention_map_jacobian(w, c, 0)).maxCoeff());
      sum_gap += beta > 0 ? gamma / beta : 0.0;
    }
    betas.push_back(beta);
    log_dAdM.push_back(sum_m / seeds);
    log_dAdX.push_back(sum_x / seeds);
    gap_over_beta.push_back(sum_gap / seeds);
  }
  std::string row_m, row_x;
  for (size_t k = 0; k < betas.size(); k += 2) {
    row_m += (k ? ", " : "") + num(betas[k], 2) + ": " + num(std::exp(log_dAdM[k]), 3);
    row_x += (k ? ", " : "") + num(betas[k], 2) + ": " + num(std::exp(log_dAdX[k]), 3);
  }
  v.note("beta: ||dA/dM||_2 = " + row_m);
  v.note("beta: ||dA/dX||_2 = " + row_x);
  v.note("mean gap gamma/beta at beta = 12: " + num(gap_over_beta.back(), 3) +
         " (the lemma's idealisation is gamma = beta)");
  v.check("||dA/dM||_2 <= 2(n-1) exp(-gamma) (Eqs. 22-28 with the constant made explicit)",
          bound_cases > 0 && bound_ok == bound_cases,
          std::to_string(bound_ok) + "/" + std::to_string(bound_cases) + " diagonally dominant cases");
  const double sm = slope(betas, log_dAdM, 4.0);
  v.check("||dA/dM||_2 decays exponentially in beta", sm < -0.3,
          "fitted d log||dA/dM|| / d beta = " + num(sm, 3) + " on beta in [4, 12] (e^-gamma predicts about " +
              num(-gap_over_beta.back(), 3) + ")");
  const double sx = slope(betas, log_dAdX, 4.0);
  v.note("FINDING: ||dA/dX||_2 decays with fitted slope " + num(sx, 3) +
         " on [4, 12]: Eq. 21 omits ||dM/dX|| ~ beta ||X||^2 / d, so the full derivative is O(beta e^-gamma), "
         "not O(alpha e^-beta); it does vanish for large beta, which is what Prop. 2 needs.");
  return v.all_passed();
}

}  // namespace jacond::cli
