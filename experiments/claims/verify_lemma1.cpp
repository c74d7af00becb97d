// Lemma 1 (App. A.2.2): with W^Q W^Kᵀ = αZ + βI, "‖∂vec A/∂vec X‖₂ = O(α e^{−β})".
//
// The proof bounds ‖∂vec A/∂vec X‖₂ by ‖∂vec A/∂vec M‖₂ (Eq. 21) and then shows the softmax
// Jacobian is small when rows are diagonally dominant (Eqs. 22–29). Eq. 21 drops the factor
// ‖∂vec M/∂vec X‖₂, which grows with ‖W^Q W^Kᵀ‖ ≈ β. So we check what the proof establishes and
// report the rest:
//  * With γ = min_i (M_ii − max_{j≠i} M_ij) and ε_i = 1 − A_ii ≤ (n−1)e^{−γ}, each softmax row
//    Jacobian J_i = diag(p) − ppᵀ has ‖J_i‖₂ ≤ max_k Σ_l |J_i[k,l]| = max_k 2p_k(1 − p_k) ≤ 2ε_i,
//    hence  ‖∂vec A/∂vec M‖₂ = max_i ‖J_i‖₂ ≤ 2(n−1)e^{−γ}        (explicit constant; checked)
//  * ‖∂vec A/∂vec M‖₂ decays as e^{−γ}: on the tail β ≥ 4, the fitted slope of ln‖∂A/∂M‖ against β
//    is within 15 % of the slope of −γ against β (both fitted on the same β, means over seeds). As
//    β grows, γ = gβ + a per draw (g the diagonal's margin over the row's nearest token, a the αZ
//    part), and ‖J_i‖₂ ≈ 2ε_i ≈ 2Σ_{j≠i} e^{−(M_ii − M_ij)} is dominated by the smallest gap, so
//    d ln‖∂A/∂M‖/dβ → −dγ/dβ; the 15 % allow for the O(1) count of near-nearest tokens and for
//    the rows trading places as the smallest gap: over 15 base seeds at 5 seeds per (α, β) the two
//    slopes differed by at most 7 %. (The old check, slope < −0.3, asked only that it decay.)
//  * ‖∂vec A/∂vec X‖₂ itself (dense SVD of the n² × nd matrix of analysis/jacobians/jacobians.h) is
//    reported: it carries the extra ‖∂M/∂X‖ ∝ β and decays only once e^{−γ} wins.
// Setting: one head (W^Q W^Kᵀ = T exactly), no biases, tokens normalised per row as after a
// LayerNorm (‖x_i‖² = d, the input a pre-norm block sees), logits M = s X T Xᵀ with s = 1/d
// so that the diagonal logits equal β·(1 + O(α/√d)) and γ ≈ β(1 − max_j ⟨x_i, x_j⟩/d).
// The checks are at the paper's α = 2; α = 1 and 4 are measured beside it, because the lemma's
// O(α e^{−β}) says the norm scales with α, while α also shrinks the gap γ (the off-diagonal logits
// grow with α), which enters through e^{−γ}. With --out, DIR/lemma1.csv holds every (α, β, seed):
// γ, ‖∂vec A/∂vec M‖₂, the bound 2(n−1)e^{−γ} (where γ > 0), ‖∂vec A/∂vec X‖₂ and α e^{−β}.
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>

#include "analysis/spectral/condition.h"
#include "analysis/jacobians/jacobians.h"
#include "experiments/cli/cli_common.h"
#include "experiments/claims/verify.h"
#include "models/track/bridge.h"
#include "models/init/init.h"

namespace jacond::cli {

namespace {

constexpr Index kN = 16, kD = 32;
constexpr double kPaperAlpha = 2.0;
const double kAlphas[] = {1.0, kPaperAlpha, 4.0};

double slope(const std::vector<double>& x, const std::vector<double>& logy, double from) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    if (x[k] < from) continue;
    sx += x[k], sy += logy[k], sxx += x[k] * x[k], sxy += x[k] * logy[k], ++m;
  }
  return (m * sxy - sx * sy) / (m * sxx - sx * sx);
}

/// One draw: the gap γ = min_i (M_ii − max_{j≠i} M_ij), ‖∂vec A/∂vec M‖₂ = max_i ‖J_i‖₂ (the
/// softmax is row-wise, so its Jacobian is block diagonal) and ‖∂vec A/∂vec X‖₂ (dense SVD).
struct Draw {
  double alpha, beta;
  int seed;
  double gamma, dA_dM, dA_dX;
};

Draw measure(double alpha, double beta, int seed, uint64_t base_seed) {
  models::InitConfig cfg;
  cfg.scheme = models::InitScheme::kOurs;
  cfg.alpha = alpha;
  cfg.beta = beta;
  cfg.seed = base_seed + 1000 * seed + 7;
  models::TensorMap t;
  models::init_block(t, 0, kD, 1, 4 * kD, cfg);
  const BlockWeights w = models::block_from_timm(t, 0, 1, 1.0 / kD);
  const Mat X = layernorm_forward(gaussian_tokens(kN, kD, cfg.seed + 1), Vec::Ones(kD), Vec::Zero(kD), 1e-12).y;
  const AttentionCache c = attention_forward(w, X);
  const Mat M = (1.0 / kD) * c.Q * c.K.transpose();
  Draw out{alpha, beta, seed, INFINITY, 0.0, 0.0};
  for (Index i = 0; i < kN; ++i) {
    double off = -INFINITY;
    for (Index j = 0; j < kN; ++j)
      if (j != i) off = std::max(off, M(i, j));
    out.gamma = std::min(out.gamma, M(i, i) - off);
    out.dA_dM = std::max(out.dA_dM, singular_values(softmax_row_jacobian(c.A[0].row(i).transpose())).maxCoeff());
  }
  out.dA_dX = singular_values(attention_map_jacobian(w, c, 0)).maxCoeff();
  return out;
}

double bound_dA_dM(const Draw& d) { return d.gamma > 0 ? 2.0 * (kN - 1) * std::exp(-d.gamma) : NAN; }

void write_csv(const std::string& out_dir, const std::vector<Draw>& draws) {
  std::ostringstream rows;
  rows << "alpha,beta,seed,n,d,gamma,norm_dA_dM,bound_dA_dM,norm_dA_dX,alpha_exp_minus_beta\n";
  for (const Draw& d : draws)
    rows << fmt(d.alpha) << "," << fmt(d.beta) << "," << d.seed << "," << kN << "," << kD << "," << fmt(d.gamma) << ","
         << fmt(d.dA_dM) << "," << fmt(bound_dA_dM(d)) << "," << fmt(d.dA_dX) << "," << fmt(d.alpha * std::exp(-d.beta))
         << "\n";
  ensure_directory(out_dir);
  write_file_atomic(out_dir + "/lemma1.csv", rows.str());
}

/// Per β (in the order drawn), the mean over seeds of f(draw) at one α.
std::vector<double> mean_per_beta(const std::vector<Draw>& draws, double alpha, const std::vector<double>& betas,
                                  double (*f)(const Draw&)) {
  std::vector<double> out;
  for (double beta : betas) {
    double sum = 0;
    int m = 0;
    for (const Draw& d : draws)
      if (d.alpha == alpha && d.beta == beta) sum += f(d), ++m;
    out.push_back(sum / m);
  }
  return out;
}

}  // namespace

bool verify_lemma1(const VerifyOptions& opt, Verifier& v) {
  const int seeds = std::max(5, opt.seeds / 20);
  std::cout << "Lemma 1: softmax Jacobian under W^Q W^K^T = alpha Z + beta I; n = " << kN << ", d = " << kD
            << ", one head, alpha = 1, 2 (the paper's; checked), 4, LayerNorm-normalised tokens, logit scale 1/d, "
            << seeds << " seeds per (alpha, beta)\n";
  std::vector<double> betas;
  for (int k = 0; k <= 12; ++k) betas.push_back(k);
  std::vector<Draw> draws;
  for (double alpha : kAlphas)
    for (double beta : betas)
      for (int s = 0; s < seeds; ++s) draws.push_back(measure(alpha, beta, s, opt.seed));

  int bound_cases = 0, bound_ok = 0;
  for (const Draw& d : draws)
    if (d.alpha == kPaperAlpha && d.gamma > 0) {
      ++bound_cases;
      bound_ok += d.dA_dM <= bound_dA_dM(d) * (1 + 1e-12);
    }
  const auto log_dA_dM = mean_per_beta(draws, kPaperAlpha, betas, [](const Draw& d) { return std::log(d.dA_dM); });
  const auto log_dA_dX = mean_per_beta(draws, kPaperAlpha, betas, [](const Draw& d) { return std::log(d.dA_dX); });
  const auto gap_over_beta =
      mean_per_beta(draws, kPaperAlpha, betas, [](const Draw& d) { return d.beta > 0 ? d.gamma / d.beta : 0.0; });
  std::string row_m, row_x;
  for (size_t k = 0; k < betas.size(); k += 2) {
    row_m += (k ? ", " : "") + num(betas[k], 2) + ": " + num(std::exp(log_dA_dM[k]), 3);
    row_x += (k ? ", " : "") + num(betas[k], 2) + ": " + num(std::exp(log_dA_dX[k]), 3);
  }
  v.note("alpha = 2, beta: ||dA/dM||_2 = " + row_m);
  v.note("alpha = 2, beta: ||dA/dX||_2 = " + row_x);
  v.note("mean gap gamma/beta at beta = 12: " + num(gap_over_beta.back(), 3) +
         " (the lemma's idealisation is gamma = beta)");
  v.check("||dA/dM||_2 <= 2(n-1) exp(-gamma) (Eqs. 22-28 with the constant made explicit)",
          bound_cases > 0 && bound_ok == bound_cases,
          std::to_string(bound_ok) + "/" + std::to_string(bound_cases) + " diagonally dominant cases (alpha = 2)");
  const auto mean_gamma = mean_per_beta(draws, kPaperAlpha, betas, [](const Draw& d) { return d.gamma; });
  const double sm = slope(betas, log_dA_dM, 4.0), predicted = -slope(betas, mean_gamma, 4.0);
  v.check("||dA/dM||_2 decays as exp(-gamma): its slope in beta within 15% of -d gamma / d beta",
          predicted < 0 && std::abs(sm - predicted) <= 0.15 * std::abs(predicted),
          "fitted d log||dA/dM|| / d beta = " + num(sm, 3) + " against -d gamma / d beta = " + num(predicted, 3) +
              " on beta in [4, 12] at alpha = 2 (the lemma's e^-beta: -1)");
  const double sx = slope(betas, log_dA_dX, 4.0);
  // The α dependence at the largest β: O(α e^{−β}) predicts ‖∂A/∂X‖ ∝ α (1 : 2 : 4).
  std::string by_alpha, ratio;
  double first_alpha_norm = 0;
  for (double alpha : kAlphas) {
    const auto x = mean_per_beta(draws, alpha, betas, [](const Draw& d) { return std::log(d.dA_dX); });
    const auto g = mean_per_beta(draws, alpha, betas, [](const Draw& d) { return d.gamma; });
    const double norm = std::exp(x.back());
    if (by_alpha.empty()) first_alpha_norm = norm;
    by_alpha += (by_alpha.empty() ? "" : "; ") + std::string("alpha ") + num(alpha, 2) + ": ||dA/dX||_2 " +
                num(norm, 3) + ", mean gamma " + num(g.back(), 3);
    ratio += (ratio.empty() ? "" : " : ") + num(norm / first_alpha_norm, 3);
  }
  std::string alphas;
  for (double alpha : kAlphas) alphas += (alphas.empty() ? "" : ", ") + num(alpha, 2);
  v.note("FINDING: ||dA/dX||_2 decays with fitted slope " + num(sx, 3) +
         " on [4, 12]: Eq. 21 omits ||dM/dX|| <= 2 ||T|| ||X|| / d ~ 2 beta ||X|| / d, so the full derivative is "
         "O(beta e^-gamma). With logits scaled by s = 1/d (jacond's) gamma ~ beta/2 (mean gamma/beta at beta = 12: " +
         num(gap_over_beta.back(), 3) +
         ") and the decay is slower than e^-beta; at the paper's s = 1 the same logits are d times larger, gamma ~ beta d/2, and "
         "e^-beta holds with room. The factor alpha fails at any scale, since alpha enters through gamma, in the "
         "exponent: at beta = 12, ||dA/dX||_2 for alpha = " + alphas + " is in the ratio " + ratio +
         " (geometric means over seeds), not 1 : 2 : 4. It does vanish for large beta, which is what Prop. 2 needs.");
  v.note("at beta = 12, " + by_alpha + " (O(alpha e^-beta) predicts ||dA/dX|| in the ratio 1 : 2 : 4; alpha also "
         "lowers the gap gamma, which enters as e^-gamma)");
  if (!opt.out_dir.empty()) write_csv(opt.out_dir, draws);
  return v.all_passed();
}

}  // namespace jacond::cli
