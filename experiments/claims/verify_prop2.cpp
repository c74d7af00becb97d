// Proposition 2 (App. A.2.3): with the `ours` init, K_sa = B_sa + E_sa is well conditioned
// because ‖E‖₂ is small against σ_min(B).
//
// Checks, for several seeds at the paper's (α, β, c) = (2, 0.6, 3), K_sa of bare attention
// at LN1(X), tokens X ~ N(0, 1):
//  * Weyl: σ_i(B) − ‖E‖ ≤ σ_i(K) ≤ σ_i(B) + ‖E‖, hence whenever ‖E‖ < σ_min(B)
//        (σ_max(B) − ‖E‖)/(σ_min(B) + ‖E‖) ≤ κ(K) ≤ (σ_max(B) + ‖E‖)/(σ_min(B) − ‖E‖).
//    This is a theorem, and a check of the σ's and of the premise's bookkeeping only: the bracket
//    holds for any K' with ‖K' − B‖ ≤ ‖E‖ (B − E, B alone pass it), and at (α, β) = (0.5, 3), where
//    the premise holds, ‖E‖/σ_min(B) ≈ 0.004, so it cannot tell a wrong K from the right one.
//  * Assembly: K is the matrix-free JVP (analysis/operators, block_kernels' attention_jvp) applied
//    to every basis vector, B and E the column-by-column assembly (analysis/jacobians); the two
//    independent implementations must agree entry by entry, ‖K − (B + E)‖_F ≤ 1e-12 ‖K‖_F
//    (rules::assembly_agrees, experiments/claims/verify_rules.h, says why 1e-12): a wrong sign in
//    E, a missing part, or a wrong JVP fails it. Checked on every split, ours and timm, and the sweep.
//  * The paper's claim: κ(K_sa) under `ours` is below κ(K_sa) under `timm` (same tokens), in the
//    median and in at least 80 % of the seeds, paired by seed. It is a statement about typical
//    draws: "every seed" would fail more often the more seeds were drawn.
//  * The paper's conclusion, a finding (Verifier::finding, never a failure): "K_ℓ is
//    well-conditioned, κ(J) ≈ 1" (Prop. 2, App. A.2.3), read as a median κ(K_sa) ≤ 2 under `ours`
//    at the paper's (α, β) = (2, 0.6). At n = 16, d = 32 it does not hold (reports/prop2, 20 seeds:
//    median 3.5e4 with one head, 2.0e5 with four); it does
//    from β ≈ 3 on (the β sweep, reports/prop2).
//  * Reported, not asserted: how often ‖E‖ < σ_min(B) actually holds (the proposition's
//    premise), κ(K) vs κ(B).
// A β sweep of `ours` at (α, c) = (2, 3) beside `mimetic` and `timm` (which have no β) shows
// where the premise holds. With --out every split lands in DIR/prop2.csv (`jacond plot DIR`).
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <sstream>

#include "analysis/report/block_report.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"
#include "experiments/claims/verify.h"
#include "experiments/claims/verify_rules.h"

namespace jacond::cli {

namespace {

struct Split {
  ConditionReport K, B;
  double e_norm;
  double assembly_residual;  // ‖K − (B + E)‖_F / ‖K‖_F, K from the JVP, B and E assembled
  bool premise() const { return e_norm < B.sigma_min; }
  // Weyl: σ_i(B) − ‖E‖ ≤ σ_i(K) ≤ σ_i(B) + ‖E‖; the bracket on κ(K) needs the premise.
  double weyl_lo() const { return premise() ? (B.sigma_max - e_norm) / (B.sigma_min + e_norm) : NAN; }
  double weyl_hi() const { return premise() ? (B.sigma_max + e_norm) / (B.sigma_min - e_norm) : NAN; }
};

/// One row of DIR/prop2.csv: the knobs of a split and its numbers.
struct SplitRow {
  std::string experiment, init;
  Index n, d, heads;
  double alpha, beta, c;
  uint64_t seed;
  Split split;
};

Split split_of(const BlockWeights& w, const Mat& X) {
  const LayerNormCache ln = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  const AttentionCache c = attention_forward(w, ln.y);
  const Mat K = operator_to_dense(AttentionJacobianOp(w, c, AttentionPart::kFull));
  const Mat B = attention_jacobian(w, c, AttentionPart::kB), E = attention_jacobian(w, c, AttentionPart::kE);
  Split s;
  s.K = condition_svd(K, "K_sa");
  s.B = condition_svd(B, "B_sa");
  s.e_norm = singular_values(E).maxCoeff();
  s.assembly_residual = rules::assembly_residual(K, B, E);
  return s;
}

void write_prop2_csv(const std::string& out_dir, const std::vector<SplitRow>& rows) {
  std::ostringstream os;
  os << "experiment,init,n,d,heads,alpha,beta,c,seed,kappa_K,sigma_max_K,sigma_min_K,kappa_B,sigma_max_B,sigma_min_B,"
        "e_norm,premise,weyl_lo,weyl_hi\n";
  for (const SplitRow& r : rows) {
    const Split& s = r.split;
    os << r.experiment << "," << r.init << "," << r.n << "," << r.d << "," << r.heads << "," << fmt(r.alpha) << ","
       << fmt(r.beta) << "," << fmt(r.c) << "," << r.seed << "," << fmt(s.K.kappa) << "," << fmt(s.K.sigma_max) << ","
       << fmt(s.K.sigma_min) << "," << fmt(s.B.kappa) << "," << fmt(s.B.sigma_max) << "," << fmt(s.B.sigma_min) << ","
       << fmt(s.e_norm) << "," << (s.premise() ? "true" : "false") << "," << fmt(s.weyl_lo()) << "," << fmt(s.weyl_hi())
       << "\n";
  }
  ensure_directory(out_dir);
  write_file_atomic(out_dir + "/prop2.csv", os.str());
}

/// `ours` across β at (α, c) = (2, 3), and `mimetic` / `timm` (no β) on the same seeds and tokens.
std::vector<SplitRow> beta_sweep(const VerifyOptions& opt, Index n, Index d, Index h) {
  const int seeds = std::max(2, opt.seeds / 100);
  std::vector<SplitRow> rows;
  for (int s = 0; s < seeds; ++s) {
    const uint64_t seed = opt.seed + 37 * s + 5;
    const Mat X = gaussian_tokens(n, d, seed ^ 0x5eedULL);
    for (double beta : {0.0, 0.3, 0.6, 1.0, 1.5, 2.0, 3.0}) {
      const BlockWeights w = init_weights("ours", 2.0, beta, 3.0, "default", seed, d, h, 4 * d, 0.0);
      rows.push_back({"beta-sweep", "ours", n, d, h, 2.0, beta, 3.0, seed, split_of(w, X)});
    }
    for (const char* init : {"mimetic", "timm"})
      rows.push_back({"beta-sweep", init, n, d, h, NAN, NAN, NAN, seed,
                      split_of(init_weights(init, 2.0, 0.6, 3.0, "default", seed, d, h, 4 * d, 0.0), X)});
  }
  return rows;
}

}  // namespace

bool verify_prop2(const VerifyOptions& opt, Verifier& v) {
  const double c = 3.0;
  const double kWellConditioned = 2.0;  // "κ(J) ≈ 1" read generously: within 2× of 1
  const int seeds = std::max(3, opt.seeds / 40);
  // Third setting: strongly diagonal-dominant Q/K (α, β) = (0.5, 3): with LayerNorm'd tokens the
  // diagonal logits are ≈ β·sqrt(d_h) ≫ the off-diagonal noise, A is near identity and E nearly
  // vanishes: the regime where the proposition's premise ‖E‖ < σ_min(B) holds and Weyl brackets κ(K).
  int weyl_applies_total = 0;
  std::vector<SplitRow> rows;
  for (const auto& shape : std::vector<std::array<double, 5>>{{16, 32, 1, 2.0, 0.6}, {16, 32, 4, 2.0, 0.6}, {16, 32, 1, 0.5, 3.0}}) {
    const Index n = static_cast<Index>(shape[0]), d = static_cast<Index>(shape[1]), h = static_cast<Index>(shape[2]);
    const double alpha = shape[3], beta = shape[4], scale = 0.0;
    // Each check names its setting: the verdict table lists all three.
    const std::string setting = "(alpha, beta, c) = (" + num(alpha) + ", " + num(beta) + ", " + num(c) + ")" +
                                (alpha == 2.0 && beta == 0.6 ? " (paper)" : " (not the paper's)") + ", " +
                                std::to_string(h) + (h == 1 ? " head" : " heads") + ", " + std::to_string(seeds) + " seeds: ";
    std::cout << "Proposition 2: K_sa = B_sa + E_sa; n = " << n << ", d = " << d << ", heads = " << h
              << ", logit scale 1/sqrt(d_h), ours (alpha, beta, c) = ("
              << alpha << ", " << beta << ", " << c << ") vs timm, " << seeds << " seeds\n";
    int premise = 0, weyl_ok = 0, weyl_applies = 0, ours_better = 0, assembled = 0, splits = 0;
    double worst_residual = 0;
    std::vector<double> k_ours, k_b, ratio, k_timm;
    for (int s = 0; s < seeds; ++s) {
      const uint64_t seed = opt.seed + 31 * s + 3;
      const Mat X = gaussian_tokens(n, d, seed ^ 0x5eedULL);
      const BlockWeights ours = init_weights("ours", alpha, beta, c, "default", seed, d, h, 4 * d, scale);
      const BlockWeights timm = init_weights("timm", alpha, beta, c, "default", seed, d, h, 4 * d, scale);
      const Split so = split_of(ours, X), st = split_of(timm, X);
      rows.push_back({"check", "ours", n, d, h, alpha, beta, c, seed, so});
      rows.push_back({"check", "timm", n, d, h, NAN, NAN, NAN, seed, st});
      k_ours.push_back(so.K.kappa);
      k_b.push_back(so.B.kappa);
      k_timm.push_back(st.K.kappa);
      ratio.push_back(so.e_norm / so.B.sigma_min);
      if (so.K.kappa < st.K.kappa) ++ours_better;
      for (const Split* sp : {&so, &st}) {
        ++splits;
        assembled += sp->assembly_residual <= rules::kAssemblyTolerance;
        worst_residual = std::max(worst_residual, sp->assembly_residual);
        if (sp->premise()) {
          if (sp == &so) ++premise;
          ++weyl_applies;
          if (sp->K.kappa <= sp->weyl_hi() * (1 + 1e-9) && sp->K.kappa >= sp->weyl_lo() * (1 - 1e-9)) ++weyl_ok;
        }
      }
    }
    v.note(setting + "ours: median kappa(K_sa) = " + num(median(k_ours)) + ", kappa(B_sa) = " + num(median(k_b)) +
           ", ||E||/sigma_min(B) = " + num(median(ratio)) + "; premise ||E|| < sigma_min(B) in " +
           std::to_string(premise) + "/" + std::to_string(seeds) + " seeds");
    v.note(setting + "timm: median kappa(K_sa) = " + num(median(k_timm)));
    weyl_applies_total += weyl_applies;
    v.check(setting + "K_sa (matrix-free JVP) = B_sa + E_sa (assembled): ||K - (B + E)||_F <= 1e-12 ||K||_F",
            assembled == splits,
            std::to_string(assembled) + "/" + std::to_string(splits) + " splits (ours and timm); largest residual " +
                num(worst_residual, 3));
    v.check_cases(setting + "Weyl bracket contains kappa(K_sa) whenever ||E|| < sigma_min(B)", weyl_ok, weyl_applies,
                  std::to_string(weyl_ok) + "/" + std::to_string(weyl_applies) + " cases (ours and timm) inside");
    if (alpha == 2.0 && beta == 0.6)
      v.finding(setting + "the paper's conclusion, K_sa well conditioned (App. A.2.3: kappa(J) ~ 1), read as median "
                          "kappa(K_sa) <= 2 under ours",
                median(k_ours) <= kWellConditioned, "median kappa(K_sa) = " + num(median(k_ours)));
    v.check(setting + "ours conditions K_sa better than timm (paper §5): in the median and in >= 80% of seeds",
            median(k_ours) < median(k_timm) && 5 * ours_better >= 4 * seeds,
            std::to_string(ours_better) + "/" + std::to_string(seeds) + " seeds; median " + num(median(k_ours)) +
                " vs " + num(median(k_timm)));
  }
  v.check("the Weyl check was exercised (premise held somewhere)", weyl_applies_total > 0,
          std::to_string(weyl_applies_total) + " cases");
  {
    const std::vector<SplitRow> sweep = beta_sweep(opt, 16, 32, 1);
    int inside = 0, applies = 0, assembled = 0;
    double worst_residual = 0;
    for (const SplitRow& r : sweep) {
      assembled += r.split.assembly_residual <= rules::kAssemblyTolerance;
      worst_residual = std::max(worst_residual, r.split.assembly_residual);
      if (!r.split.premise()) continue;
      ++applies;
      inside += r.split.K.kappa <= r.split.weyl_hi() * (1 + 1e-9) && r.split.K.kappa >= r.split.weyl_lo() * (1 - 1e-9);
    }
    v.check_cases("beta sweep (ours across beta, mimetic, timm; n = 16, d = 32, 1 head, " +
                      std::to_string(sweep.size() / 9) + " seeds): Weyl bracket holds where the premise does",
                  inside, applies, std::to_string(inside) + "/" + std::to_string(applies) + " of " +
                                   std::to_string(sweep.size()) + " splits");
    v.check("beta sweep: K_sa (matrix-free JVP) = B_sa + E_sa (assembled): ||K - (B + E)||_F <= 1e-12 ||K||_F",
            assembled == static_cast<int>(sweep.size()),
            std::to_string(assembled) + "/" + std::to_string(sweep.size()) + " splits; largest residual " +
                num(worst_residual, 3));
    rows.insert(rows.end(), sweep.begin(), sweep.end());
  }
  if (!opt.out_dir.empty()) write_prop2_csv(opt.out_dir, rows);
  return v.all_passed();
}

}  // namespace jacond::cli
