// Proposition 1 (softmax conditioning), paper §5.2 and App. A.2.1.
//
// M = αZ + βI ∈ R^{n×n}, Z_ij ~ N(0, 1), A = S_τ(M) row-wise softmax with temperature τ = 1.
//
// Diagonal dominance, with γ = min_i (M_ii − max_{j≠i} M_ij) > 0. We derive the ε of the
// proposition: every off-diagonal entry satisfies A_ij = e^{(M_ij−M_ii)/τ}/Σ_k e^{(M_ik−M_ii)/τ}
// ≤ e^{−γ/τ}, so with Δ = A − I each row has |Δ_ii| + Σ_{j≠i}|Δ_ij| = 2(1 − A_ii)
// ≤ 2(n−1)e^{−γ/τ} and each column likewise ≤ (1 − A_jj) + (n−1)e^{−γ/τ} ≤ 2(n−1)e^{−γ/τ}.
// Hence ‖Δ‖₂ ≤ sqrt(‖Δ‖₁‖Δ‖_∞) ≤ ε(γ/τ) := 2(n−1)e^{−γ/τ}, and by Weyl
//     κ(A) ≤ (1 + ε)/(1 − ε)  whenever ε < 1,     ε → 0 as γ/τ → ∞.
//
// Diffuse rows, with Δ_r = max_i (max_j M_ij − min_j M_ij): every entry satisfies
// |A_ij − 1/n| ≤ (e^{Δ_r/τ} − 1)/n, so ‖A − 11ᵀ/n‖₂ ≤ ‖·‖_F ≤ e^{Δ_r/τ} − 1. For v ⟂ 1,
// Av = (A − 11ᵀ/n)v, so σ_min(A) ≤ e^{Δ_r/τ} − 1, while σ_max(A) ≥ ‖A1‖/‖1‖ = 1. Hence
//     κ(A) ≥ 1/(e^{Δ_r/τ} − 1) ≈ τ/Δ_r       (the proposition's "κ ≳ τ/Δ").
#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "experiments/claims/verify.h"
#include "experiments/cli/cli_common.h"

namespace jacond::cli {

namespace {

Mat draw_logits(Index n, double alpha, double beta, std::mt19937_64& rng) {
  std::normal_distribution<double> N(0.0, 1.0);
  Mat M(n, n);
  for (Index j = 0; j < n; ++j)
    for (Index i = 0; i < n; ++i) M(i, j) = alpha * N(rng);
  M.diagonal().array() += beta;
  return M;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

double kappa_of(const Mat& A) { return condition_svd(A, "attention").kappa; }

}  // namespace

bool verify_prop1(const VerifyOptions& opt, Verifier& v) {
  std::cout << "Proposition 1: softmax conditioning, M = alpha Z + beta I (App. A.2.1: n = 10, alpha = 0.1)\n";
  const Index n = 10;
  const double tau = 1.0, alpha = 0.1;
  std::mt19937_64 rng(opt.seed + 101);

  // Peak: beta = 5.
  std::vector<double> k_peak, bound_peak;
  bool bound_holds = true;
  int bound_applies = 0;
  for (int s = 0; s < opt.seeds; ++s) {
    const Mat M = draw_logits(n, alpha, 5.0, rng);
    double gamma = INFINITY;
    for (Index i = 0; i < n; ++i) {
      double off = -INFINITY;
      for (Index j = 0; j < n; ++j)
        if (j != i) off = std::max(off, M(i, j));
      gamma = std::min(gamma, M(i, i) - off);
    }
    const double kappa = kappa_of(softmax_rows(M / tau));
    k_peak.push_back(kappa);
    const double eps = 2.0 * (n - 1) * std::exp(-gamma / tau);
    if (gamma > 0 && eps < 1) {
      ++bound_applies;
      const double bound = (1 + eps) / (1 - eps);
      bound_peak.push_back(bound);
      if (kappa > bound * (1 + 1e-12)) bound_holds = false;
    }
  }
  v.note("peak (beta = 5): kappa median " + num(median(k_peak)) + ", 5%-95% [" + num(quantile(k_peak, 0.05)) + ", " +
         num(quantile(k_peak, 0.95)) + "] over " + std::to_string(opt.seeds) + " seeds (paper: ~1.1)");
  v.check("diagonal dominance bound kappa <= (1+eps)/(1-eps), eps = 2(n-1)exp(-gamma/tau)",
          bound_holds && bound_applies > 0,
          "held in " + std::to_string(bound_applies) + "/" + std::to_string(bound_applies) +
              " seeds where eps < 1 (" + std::to_string(bound_applies) + "/" + std::to_string(opt.seeds) +
              " seeds); median bound " + (bound_peak.empty() ? std::string("n/a") : num(median(bound_peak))));
  v.check("peak case is well conditioned (paper kappa ~ 1.1)", median(k_peak) < 1.5,
          "median kappa " + num(median(k_peak)) + " < 1.5");

  // Diffuse: beta = 0.
  std::vector<double> k_diffuse, tau_over_delta;
  bool lower_holds = true;
  for (int s = 0; s < opt.seeds; ++s) {
    const Mat M = draw_logits(n, alpha, 0.0, rng);
    double range = 0;
    for (Index i = 0; i < n; ++i) range = std::max(range, M.row(i).maxCoeff() - M.row(i).minCoeff());
    const double kappa = kappa_of(softmax_rows(M / tau));
    k_diffuse.push_back(kappa);
    tau_over_delta.push_back(tau / range);
    if (kappa < (1.0 / std::expm1(range / tau)) * (1 - 1e-12)) lower_holds = false;
  }
  v.note("diffuse (beta = 0): kappa median " + num(median(k_diffuse)) + ", 5%-95% [" + num(quantile(k_diffuse, 0.05)) +
         ", " + num(quantile(k_diffuse, 0.95)) + "]; tau/Delta median " + num(median(tau_over_delta)) +
         " (paper: kappa ~ 730.1 for one draw)");
  v.check("diffuse lower bound kappa >= 1/(exp(Delta/tau) - 1) ~ tau/Delta", lower_holds,
          "held for all " + std::to_string(opt.seeds) + " seeds");
  const double med = median(k_diffuse);
  v.check("paper's order of magnitude (kappa ~ 730.1)", med > 73.01 && med < 7301,
          "median " + num(med) + " within a factor 10 of 730.1");

  // Growth with n in the diffuse case.
  std::string growth;
  double prev = 0;
  bool grows = true;
  for (Index nn : {10, 20, 40, 80}) {
    std::vector<double> ks;
    for (int s = 0; s < std::max(20, opt.seeds / 4); ++s) ks.push_back(kappa_of(softmax_rows(draw_logits(nn, alpha, 0.0, rng))));
    const double m = median(ks);
    growth += (growth.empty() ? "" : ", ") + std::string("n=") + std::to_string(nn) + ": " + num(m);
    if (m <= prev) grows = false;
    prev = m;
  }
  v.check("diffuse kappa grows with n", grows, "median kappa " + growth);
  return v.all_passed();
}

}  // namespace jacond::cli
