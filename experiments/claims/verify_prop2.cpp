// Proposition 2 (App. A.2.3): with the `ours` init, K_sa = B_sa + E_sa is well conditioned
// because ‖E‖₂ is small against σ_min(B).
//
// Checks, for several seeds at the paper's (α, β, c) = (2, 0.6, 3), K_sa of bare attention
// at LN1(X), tokens X ~ N(0, 1):
//  * Weyl: σ_i(B) − ‖E‖ ≤ σ_i(K) ≤ σ_i(B) + ‖E‖, hence whenever ‖E‖ < σ_min(B)
//        (σ_max(B) − ‖E‖)/(σ_min(B) + ‖E‖) ≤ κ(K) ≤ (σ_max(B) + ‖E‖)/(σ_min(B) − ‖E‖).
//    This is a theorem; it checks our three independent assemblies against each other.
//  * The paper's claim: κ(K_sa) under `ours` is far below κ(K_sa) under `timm` (same tokens).
//  * Reported, not asserted: how often ‖E‖ < σ_min(B) actually holds (the proposition's
//    premise), κ(K) vs κ(B).
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>

#include "analysis/report/block_report.h"
#include "analysis/jacobians/jacobians.h"
#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"
#include "experiments/claims/verify.h"

namespace jacond::cli {

namespace {

struct Split {
  ConditionReport K, B;
  double e_norm;
};

Split split_of(const BlockWeights& w, const Mat& X) {
  const LayerNormCache ln = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  const AttentionCache c = attention_forward(w, ln.y);
  Split s;
  s.K = condition_svd(attention_jacobian(w, c, AttentionPart::kFull), "K_sa");
  s.B = condition_svd(attention_jacobian(w, c, AttentionPart::kB), "B_sa");
  s.e_norm = singular_values(attention_jacobian(w, c, AttentionPart::kE)).maxCoeff();
  return s;
}

// The upper of the two middle values for an even count (what verify prop2 has always reported).
double upper_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

bool verify_prop2(const VerifyOptions& opt, Verifier& v) {
  const double c = 3.0;
  const int seeds = std::max(3, opt.seeds / 40);
  // Third setting: strongly diagonal-dominant Q/K (α, β) = (0.5, 3): with LayerNorm'd tokens the
  // diagonal logits are ≈ β·sqrt(d_h) ≫ the off-diagonal noise, A is near identity and E nearly
  // vanishes: the regime where the proposition's premise ‖E‖ < σ_min(B) holds and Weyl brackets κ(K).
  int weyl_applies_total = 0;
  for (const auto& shape : std::vector<std::array<double, 5>>{{16, 32, 1, 2.0, 0.6}, {16, 32, 4, 2.0, 0.6}, {16, 32, 1, 0.5, 3.0}}) {
    const Index n = static_cast<Index>(shape[0]), d = static_cast<Index>(shape[1]), h = static_cast<Index>(shape[2]);
    const double alpha = shape[3], beta = shape[4], scale = 0.0;
    std::cout << "Proposition 2: K_sa = B_sa + E_sa; n = " << n << ", d = " << d << ", heads = " << h
              << ", logit scale 1/sqrt(d_h), ours (alpha, beta, c) = ("
              << alpha << ", " << beta << ", " << c << ") vs timm, " << seeds << " seeds\n";
    int premise = 0, weyl_ok = 0, weyl_applies = 0, ours_better = 0;
    std::vector<double> k_ours, k_b, ratio, k_timm;
    for (int s = 0; s < seeds; ++s) {
      const uint64_t seed = opt.seed + 31 * s + 3;
      const Mat X = gaussian_tokens(n, d, seed ^ 0x5eedULL);
      const BlockWeights ours = init_weights("ours", alpha, beta, c, "default", seed, d, h, 4 * d, scale);
      const BlockWeights timm = init_weights("timm", alpha, beta, c, "default", seed, d, h, 4 * d, scale);
      const Split so = split_of(ours, X), st = split_of(timm, X);
      k_ours.push_back(so.K.kappa);
      k_b.push_back(so.B.kappa);
      k_timm.push_back(st.K.kappa);
      ratio.push_back(so.e_norm / so.B.sigma_min);
      if (so.K.kappa < st.K.kappa) ++ours_better;
      for (const Split* sp : {&so, &st}) {
        if (sp->e_norm < sp->B.sigma_min) {
          if (sp == &so) ++premise;
          ++weyl_applies;
          const double hi = (sp->B.sigma_max + sp->e_norm) / (sp->B.sigma_min - sp->e_norm);
          const double lo = (sp->B.sigma_max - sp->e_norm) / (sp->B.sigma_min + sp->e_norm);
          if (sp->K.kappa <= hi * (1 + 1e-9) && sp->K.kappa >= lo * (1 - 1e-9)) ++weyl_ok;
        }
      }
    }
    v.note("ours: median kappa(K_sa) = " + num(upper_median(k_ours)) + ", kappa(B_sa) = " + num(upper_median(k_b)) +
           ", ||E||/sigma_min(B) = " + num(upper_median(ratio)) + "; premise ||E|| < sigma_min(B) in " +
           std::to_string(premise) + "/" + std::to_string(seeds) + " seeds");
    v.note("timm: median kappa(K_sa) = " + num(upper_median(k_timm)));
    weyl_applies_total += weyl_applies;
    v.check("Weyl bracket contains kappa(K_sa) whenever ||E|| < sigma_min(B)", weyl_ok == weyl_applies,
            std::to_string(weyl_ok) + "/" + std::to_string(weyl_applies) + " cases (ours and timm) inside");
    v.check("ours conditions K_sa better than timm (paper §5)", ours_better == seeds,
            std::to_string(ours_better) + "/" + std::to_string(seeds) + " seeds; median " + num(upper_median(k_ours)) +
                " vs " + num(upper_median(k_timm)));
  }
  v.check("the Weyl check was exercised (premise held somewhere)", weyl_applies_total > 0,
          std::to_string(weyl_applies_total) + " cases");
  return v.all_passed();
}

}  // namespace jacond::cli
