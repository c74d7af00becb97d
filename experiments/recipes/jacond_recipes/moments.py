"""moments: App. A.2.1's moments (Eqs. 14–20): paper formula, derived formula, Monte Carlo."""

import numpy as np

from .common import check_verdict, tested_verdicts

NAME = "moments"
SUMMARY = "the App. A.2.1 moments table: paper formula, corrected formula and Monte Carlo side by side"


def run(r):
    data, figures, verify = r.verify_claim("moments", 2000, quick_seeds=30)
    t = r.read_csv(f"{data}/moments.csv")
    first = t.iloc[0]

    report = r.start_report("The moments behind the `ours` init (App. A.2.1, Eqs. 14–20)")
    report.text(f"""
**The claim** (*Cutting the Skip*, App. A.2.1). With X ∈ R^(n×d) standard Gaussian, Z ∈ R^(d×d) with
N(0, 1/d) entries, A = XXᵀ, B = XZXᵀ and C = αB + βA (the logits of the `ours` Q/K init), the paper gives
the means and variances of the diagonal and off-diagonal entries and of the gap γ = C_ii − C_ij, and
concludes that for β > 0 the diagonal mean βd dominates. jacond derives each moment
(`experiments/claims/verify_moments.cpp`), estimates it by Monte Carlo (d = {first['d']}, α = {first['alpha']:g},
β = {first['beta']:g}, {first['trials']} trials) and checks agreement within 5 standard errors — the sampling
noise, not a tuned tolerance.""")
    report.section("The table")
    table = t[["equation", "quantity", "statistic", "paper_formula", "paper", "derived_formula", "derived", "measured",
               "standard_error", "paper_agrees"]].rename(columns={
                   "paper_formula": "paper prints", "paper": "= (paper)", "derived_formula": "derived",
                   "derived": "= (derived)", "measured": "Monte Carlo", "standard_error": "SE",
                   "paper_agrees": "paper within 5 SE"})
    report.table(table)
    report.section("Figure")
    for png in figures:
        r.add_figure(report, png, "variances: Monte Carlo, derived and the paper's formula")
    wrong = t[t["paper_agrees"].astype(str).str.lower() == "false"]
    gamma = t[t["quantity"] == "gamma"].set_index("statistic")["measured"]
    ratio = gamma["mean"] / np.sqrt(gamma["variance"])
    needed = np.sqrt(2 * np.log(197))
    d_needed = first["d"] * (needed / ratio) ** 2  # E[γ]/sd(γ) ∝ sqrt(d)
    report.section("Findings")
    verdicts = [check_verdict(c) for cl in verify["claims"] for c in cl["checks"]]
    passed, tested = verdicts.count("pass"), len(tested_verdicts(verdicts))  # N/A: tested nothing
    agreement = (f"Every derived moment agrees with the Monte Carlo ({passed} of {tested} checks pass"
                 if passed == tested else
                 f"{tested - passed} of the {tested} checks of the derived moments against the Monte Carlo "
                 "do not pass (the table above") + (f"; {len(verdicts) - tested} N/A)" if tested < len(verdicts) else ")")
    report.text(f"""
- {agreement}.
- The paper's printed formula disagrees with the simulation in {len(wrong)} place(s):
  {', '.join(f"{row.equation} Var({row.quantity}) (prints {row.paper_formula} = {row.paper:.4g}, measured {row.measured:.4g})" for row in wrong.itertuples())}.
  Eq. 17's Var(B_ij) is d, not ≈ 1 (E[B_ij²] = Σ_ab E[Z_ab²] E[x_ia²] E[x_jb²] = d² · 1/d), and Eqs. 19–20 inherit it.
- **Eq. 19's misprint undermines the paper's case that the default init is diffuse** (App. A.2.1, the paragraph
  after Eq. 19: β = 0, α ≈ 0.04, "all the values in the attention map are mean 0 with a variance much
  smaller than 1"). That reads Var(C_ij) as α² = {0.04 ** 2:.4f}; the corrected α²d is {0.04 ** 2 * 64:.2f} at d = 64
  (a ViT-B head) but {0.04 ** 2 * 768:.2f} at d = 768 (ViT-B's width), not much smaller than 1.
- The conclusion holds **per pair** and at large d: E[γ] = βd while sd(γ) grows like sqrt(d) under the
  corrected variance; here E[γ]/sd(γ) = {ratio:.3g}, so one gap γ = C_ii − C_ij is positive most of the time.
- Proposition 1's dominance is stronger: C_ii above **every** C_ij of its row, all n − 1 gaps at once. The
  smallest of n − 1 gaps lies roughly sd(γ)·sqrt(2 ln n) below their mean (treating the gaps as independent, a
  rough guide), so it needs E[γ]/sd(γ) ≳ sqrt(2 ln n): {needed:.3g} at n = 197 (ViT-B/16's tokens), against
  {ratio:.3g} here. At d = {first['d']} with these (α, β) most rows of a 197-token softmax are therefore not
  diagonally dominant; the ratio grows like sqrt(d), reaching {needed:.3g} at d ≈ {d_needed:.0f}.""")
    for note in r.notes(verify):
        report.text(f"> {note}")
    r.finish(report)
