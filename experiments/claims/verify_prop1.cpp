// Proposition 1 (softmax conditioning), paper §5.2, App. A.2.1 and Fig. 5.
//
// M = αZ + βI ∈ R^{n×n}, Z_ij ~ N(0, 1), A = S_τ(M) row-wise softmax with temperature τ = 1.
// Z's variance is jacond's convention: App. A.2.1 states none for Fig. 5 ("truncated normal"), and
// it departs from Eq. 11's Z_ij ~ N(0, 1/d), which at d = n = 10 is α/√10 here and raises the
// diffuse κ about 3× (a note measures it on draws of its own).
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
//
// Fig. 5 reports one draw of each case, so the checks against it ask that the paper's draw be a
// typical one of jacond's: the peak case's median κ ≤ 1.15 and its 5–95 % range meeting [1.05, 1.15]
// (the values "κ ≈ 1.1" rounds from), the diffuse case's 5–95 % range holding 730.1
// (rules::peak_agrees, rules::diffuse_agrees, experiments/claims/verify_rules.h).
// Both bounds are checked on every draw of four experiments: the paper's peak (β = 5) and
// diffuse (β = 0) cases at n = 10, α = 0.1; β from 0 to 6 at n = 10 (κ falls from the diffuse
// to the peaked regime); and n from 10 to 160 in the diffuse case (κ grows with n). With --out,
// DIR/prop1_draws.csv holds every draw and DIR/prop1_examples.csv the two 10×10 softmax
// matrices of Fig. 5 (`jacond plot DIR` draws them).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "experiments/claims/verify.h"
#include "experiments/claims/verify_rules.h"
#include "experiments/cli/cli_common.h"

namespace jacond::cli {

namespace {

constexpr double kTau = 1.0, kAlpha = 0.1;

Mat draw_logits(Index n, double alpha, double beta, std::mt19937_64& rng) {
  std::normal_distribution<double> N(0.0, 1.0);  // Z ~ N(0, 1): jacond's convention (file comment)
  Mat M(n, n);
  for (Index j = 0; j < n; ++j)
    for (Index i = 0; i < n; ++i) M(i, j) = alpha * N(rng);
  M.diagonal().array() += beta;
  return M;
}

using rules::quantile;

/// One draw of M, its softmax A = S_τ(M), κ(A) and both bounds of the proposition.
struct Draw {
  std::string experiment;
  Index n = 0;
  double beta = 0, kappa = 0;
  double gamma = 0;        // min_i (M_ii − max_{j≠i} M_ij)
  double eps = 0;          // 2(n−1)e^{−γ/τ}
  double upper = NAN;      // (1+ε)/(1−ε) where γ > 0 and ε < 1, else NaN (the bound says nothing)
  double delta = 0;        // max_i (max_j M_ij − min_j M_ij)
  double lower = 0;        // 1/(e^{Δ/τ} − 1)
  Mat softmax;             // kept only for the Fig. 5 examples
};

Draw draw(const std::string& experiment, Index n, double beta, std::mt19937_64& rng) {
  const Mat M = draw_logits(n, kAlpha, beta, rng);
  Draw d;
  d.experiment = experiment, d.n = n, d.beta = beta;
  d.gamma = INFINITY;
  for (Index i = 0; i < n; ++i) {
    double off = -INFINITY;
    for (Index j = 0; j < n; ++j)
      if (j != i) off = std::max(off, M(i, j));
    d.gamma = std::min(d.gamma, M(i, i) - off);
    d.delta = std::max(d.delta, M.row(i).maxCoeff() - M.row(i).minCoeff());
  }
  d.softmax = softmax_rows(M / kTau);
  d.kappa = condition_svd(d.softmax, "attention").kappa;
  d.eps = 2.0 * static_cast<double>(n - 1) * std::exp(-d.gamma / kTau);
  if (d.gamma > 0 && d.eps < 1) d.upper = (1 + d.eps) / (1 - d.eps);
  d.lower = 1.0 / std::expm1(d.delta / kTau);
  return d;
}

bool upper_holds(const Draw& d) { return std::isnan(d.upper) || d.kappa <= d.upper * (1 + 1e-12); }
bool lower_holds(const Draw& d) { return d.kappa >= d.lower * (1 - 1e-12); }

std::vector<double> kappas(const std::vector<Draw>& draws, const std::string& experiment, double beta, Index n) {
  std::vector<double> k;
  for (const Draw& d : draws)
    if (d.experiment == experiment && d.beta == beta && d.n == n) k.push_back(d.kappa);
  return k;
}

void write_prop1_csv(const std::string& out_dir, const std::vector<Draw>& draws, const Draw& peak, const Draw& diffuse) {
  std::ostringstream rows, examples;
  rows << "experiment,n,alpha,beta,tau,kappa,gamma,eps,upper_bound,delta,lower_bound\n";
  for (const Draw& d : draws)
    rows << d.experiment << "," << d.n << "," << fmt(kAlpha) << "," << fmt(d.beta) << "," << fmt(kTau) << ","
         << fmt(d.kappa) << "," << fmt(d.gamma) << "," << fmt(d.eps) << "," << fmt(d.upper) << "," << fmt(d.delta) << ","
         << fmt(d.lower) << "\n";
  examples << "example,beta,kappa,row,col,value\n";
  for (const Draw* d : {&peak, &diffuse})
    for (Index i = 0; i < d->softmax.rows(); ++i)
      for (Index j = 0; j < d->softmax.cols(); ++j)
        examples << d->experiment << "," << fmt(d->beta) << "," << fmt(d->kappa) << "," << i << "," << j << ","
                 << fmt(d->softmax(i, j)) << "\n";
  ensure_directory(out_dir);
  write_file_atomic(out_dir + "/prop1_draws.csv", rows.str());
  write_file_atomic(out_dir + "/prop1_examples.csv", examples.str());
}

}  // namespace

bool verify_prop1(const VerifyOptions& opt, Verifier& v) {
  std::cout << "Proposition 1: softmax conditioning, M = alpha Z + beta I (App. A.2.1: n = 10, alpha = 0.1), "
               "Z_ij ~ N(0, 1)\n";
  std::mt19937_64 rng(opt.seed + 101);
  std::vector<Draw> draws;
  // At least 20 draws per Fig. 5 case, as per point of the sweeps: a 5–95 % range needs a sample.
  const int fig5 = std::max(20, opt.seeds);
  for (int s = 0; s < fig5; ++s) draws.push_back(draw("peak", 10, 5.0, rng));
  for (int s = 0; s < fig5; ++s) draws.push_back(draw("diffuse", 10, 0.0, rng));
  const int per_point = std::max(20, opt.seeds / 4);
  const std::vector<Index> sizes = {10, 20, 40, 80, 160};
  for (Index n : sizes)
    for (int s = 0; s < per_point; ++s) draws.push_back(draw("n", n, 0.0, rng));
  for (int b = 0; b <= 12; ++b)
    for (int s = 0; s < per_point; ++s) draws.push_back(draw("beta", 10, 0.5 * b, rng));

  const std::vector<double> k_peak = kappas(draws, "peak", 5.0, 10), k_diffuse = kappas(draws, "diffuse", 0.0, 10);
  int applies = 0, upper_ok = 0, lower_ok = 0;
  for (const Draw& d : draws) {
    applies += !std::isnan(d.upper);
    upper_ok += !std::isnan(d.upper) && upper_holds(d);
    lower_ok += lower_holds(d);
  }
  const std::string total = std::to_string(draws.size());
  v.note("peak (beta = 5): kappa median " + num(median(k_peak)) + ", 5%-95% [" + num(quantile(k_peak, 0.05)) + ", " +
         num(quantile(k_peak, 0.95)) + "] over " + std::to_string(fig5) + " draws (paper: ~1.1)");
  v.check("diagonal dominance bound kappa <= (1+eps)/(1-eps), eps = 2(n-1)exp(-gamma/tau)",
          upper_ok == applies && applies > 0,
          "held in " + std::to_string(upper_ok) + "/" + std::to_string(applies) + " draws where eps < 1 (of " + total +
              " draws over all four experiments)");
  v.check("peak case agrees with Fig. 5 (kappa ~ 1.1, one draw): median kappa <= 1.15 and the 5%-95% range meets "
          "[1.05, 1.15]",
          rules::peak_agrees(k_peak, median(k_peak)),
          "median kappa " + num(median(k_peak)) + ", 5%-95% [" + num(quantile(k_peak, 0.05)) + ", " +
              num(quantile(k_peak, 0.95)) + "]");
  v.note("diffuse (beta = 0): kappa median " + num(median(k_diffuse)) + ", 5%-95% [" + num(quantile(k_diffuse, 0.05)) +
         ", " + num(quantile(k_diffuse, 0.95)) + "] (paper: kappa ~ 730.1 for one draw)");
  v.check("diffuse lower bound kappa >= 1/(exp(Delta/tau) - 1) ~ tau/Delta", lower_ok == static_cast<int>(draws.size()),
          "held in " + std::to_string(lower_ok) + "/" + total + " draws");
  v.check("diffuse case agrees with Fig. 5 (kappa ~ 730.1, one draw): 730.1 inside the 5%-95% range",
          rules::diffuse_agrees(k_diffuse),
          "5%-95% [" + num(quantile(k_diffuse, 0.05)) + ", " + num(quantile(k_diffuse, 0.95)) + "], median " +
              num(median(k_diffuse)));
  {
    // Eq. 11's variance, Z ~ N(0, 1/d) with d = n = 10, on draws of their own (a separate stream: the
    // draws above and their CSV are unchanged): how far the convention moves Fig. 5's numbers.
    std::mt19937_64 rng11(opt.seed + 1011);
    std::vector<double> peak11, diffuse11;
    const double alpha11 = kAlpha / std::sqrt(10.0);
    const auto kappa11 = [&](double beta) {
      return condition_svd(softmax_rows(draw_logits(10, alpha11, beta, rng11) / kTau), "attention").kappa;
    };
    for (int s = 0; s < fig5; ++s) peak11.push_back(kappa11(5.0));
    for (int s = 0; s < fig5; ++s) diffuse11.push_back(kappa11(0.0));
    v.note("convention: Z_ij ~ N(0, 1) (Fig. 5 states no variance), not Eq. 11's N(0, 1/d); with Eq. 11's at d = n = 10 "
           "the diffuse median would be " + num(median(diffuse11)) + ", 5%-95% [" + num(quantile(diffuse11, 0.05)) + ", " +
           num(quantile(diffuse11, 0.95)) + "], the peak median " + num(median(peak11)) +
           "; Fig. 5's draws " +
           (rules::diffuse_agrees(diffuse11) && rules::peak_agrees(peak11, median(peak11))
                ? "are typical under it too (one draw per case cannot tell the two conventions apart)"
                : "would not be typical under it"));
  }

  std::string growth;
  double prev = 0;
  bool grows = true;
  for (Index n : sizes) {
    const double m = median(kappas(draws, "n", 0.0, n));
    growth += (growth.empty() ? "" : ", ") + std::string("n=") + std::to_string(n) + ": " + num(m);
    grows = grows && m > prev;
    prev = m;
  }
  v.check("diffuse kappa grows with n", grows, "median kappa " + growth);

  std::string fall;
  for (int b = 0; b <= 12; b += 2) fall += (fall.empty() ? "" : ", ") + num(0.5 * b) + ": " + num(median(kappas(draws, "beta", 0.5 * b, 10)), 3);
  v.note("median kappa against beta (n = 10): " + fall);

  if (!opt.out_dir.empty()) {
    auto first = [&](const std::string& e) { return *std::find_if(draws.begin(), draws.end(), [&](const Draw& d) { return d.experiment == e; }); };
    write_prop1_csv(opt.out_dir, draws, first("peak"), first("diffuse"));
  }
  return v.all_passed();
}

}  // namespace jacond::cli
