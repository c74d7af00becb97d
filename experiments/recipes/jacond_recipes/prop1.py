"""prop1: Proposition 1 of "Cutting the Skip" (§5.2, App. A.2.1, Fig. 5): softmax conditioning."""

import numpy as np

NAME = "prop1"
SUMMARY = "softmax of peaked vs diffuse logits (Fig. 5), kappa against beta and n with the bounds"


def slope(x, y):
    """Least-squares slope of log10 y against log10 x."""
    return float(np.polyfit(np.log10(x), np.log10(y), 1)[0])


def q(values, quantile):
    """The quantile as `jacond verify prop1` takes it (the sorted value at rank ⌊q·(n − 1)⌋), so the page's
    5–95 % ranges are the verdict's."""
    return values.quantile(quantile, interpolation="lower")


def upper_bound_excess(draws):
    """Per β of the β sweep where the upper bound applies (ε < 1): the median over draws of
    (bound − 1)/(κ − 1), how many times the bound overstates κ's distance from 1."""
    rows = draws[(draws["experiment"] == "beta") & np.isfinite(draws["upper_bound"]) & (draws["kappa"] > 1)]
    return ((rows["upper_bound"] - 1) / (rows["kappa"] - 1)).groupby(rows["beta"]).median()


def run(r):
    data, figures, verify = r.verify_claim("prop1", 400, quick_seeds=40)
    draws = r.read_csv(f"{data}/prop1_draws.csv")

    peak = draws[draws["experiment"] == "peak"]["kappa"]
    diffuse = draws[draws["experiment"] == "diffuse"]["kappa"]
    by_n = draws[draws["experiment"] == "n"].groupby("n")["kappa"].median()
    by_beta = draws[draws["experiment"] == "beta"].groupby("beta")["kappa"].median()
    applies = draws["upper_bound"].notna() & np.isfinite(draws["upper_bound"])
    first_beta = by_beta[by_beta < 1.5].index.min()
    diffuse_rows = draws[draws["experiment"] == "diffuse"]
    beta_draws = int(((draws["experiment"] == "beta") & (draws["beta"] == by_beta.index[0])).sum())
    n_draws = int(((draws["experiment"] == "n") & (draws["n"] == by_n.index[0])).sum())
    lower_gap = (diffuse_rows["kappa"] / diffuse_rows["lower_bound"]).median()
    excess = upper_bound_excess(draws)

    report = r.start_report("Proposition 1: when is the softmax well conditioned?")
    report.text("""
**The claim** (*Cutting the Skip*, §5.2, Prop. 1, App. A.2.1). For logits M = αZ + βI (Z Gaussian,
temperature τ = 1), the row softmax A = S(M) is well conditioned when M is diagonally dominant
(γ = min_i(M_ii − max_{j≠i} M_ij) large: κ(A) ≤ (1+ε)/(1−ε) with ε = 2(n−1)e^{−γ/τ}) and ill conditioned
when the rows are diffuse (row range Δ small: κ(A) ≥ 1/(e^{Δ/τ} − 1) ≈ τ/Δ). The paper's Fig. 5 shows one
10×10 draw of each at α = 0.1: β = 5 gives κ ≈ 1.1, β = 0 gives κ ≈ 730.1. This is why the `ours` init adds
βI to W^Q W^Kᵀ. The bounds as stated here are derived in `experiments/claims/verify_prop1.cpp`.

**Z's variance is jacond's convention**: Z_ij ~ N(0, 1). App. A.2.1 states none for Fig. 5 ("truncated
normal"), and this departs from Eq. 11's Z_ij ~ N(0, 1/d), which at d = n = 10 would shrink α by √10 and
raise the diffuse κ about 3× (measured in the last finding). Each Fig. 5 value is one draw, so the verdict
asks that it be a typical draw of jacond's: the peak median κ ≤ 1.15 with the 5–95 % range meeting
[1.05, 1.15] (what "≈ 1.1" rounds from), and 730.1 inside the diffuse 5–95 % range.""")
    report.section("Verdict")
    report.table(r.checks_table(verify))
    report.section("Figure")
    for png in figures:
        r.add_figure(report, png, "Fig. 5 and kappa against beta and n")
    report.section("Findings")
    report.text(f"""
- **Fig. 5 reproduced** (Z ~ N(0, 1)). Peaked (β = 5): median κ {peak.median():.3g}, 5–95 %
  [{q(peak, 0.05):.4g}, {q(peak, 0.95):.4g}] over {len(peak)} draws (paper: ≈ 1.1).
  Diffuse (β = 0): median κ {diffuse.median():.4g}, 5–95 % [{q(diffuse, 0.05):.4g}, {q(diffuse, 0.95):.4g}]
  (paper: 730.1 for its one draw, {"inside" if q(diffuse, 0.05) <= 730.1 <= q(diffuse, 0.95) else "outside"} that range).
- **Both bounds hold on every draw** ({len(draws)} draws over four experiments; the upper bound applies,
  ε < 1, on {int(applies.sum())} of them). The upper bound is informative once β is large enough for γ > 0
  with ε < 1; both it and κ then tend to 1, but the bound overstates κ − 1 by a factor (median
  (bound − 1)/(κ − 1) in the β sweep) {"that falls with β, " if excess.is_monotonic_decreasing else ""}from
  {excess.iloc[0]:.3g} at β = {excess.index[0]:g} to {excess.iloc[-1]:.3g} at β = {excess.index[-1]:g}. The lower bound 1/(e^(Δ/τ) − 1) is true but
  loose: about {lower_gap:.0f}× below the median in the diffuse case, because Δ is the largest row range.
- **Against β** (n = 10): the median κ falls from {by_beta.iloc[0]:.4g} at β = 0 to {by_beta.iloc[-1]:.3g} at
  β = {by_beta.index[-1]:g}; it is below 1.5 from β = {first_beta:g} on.
- **One setting, three medians.** n = 10, β = 0 appears in three experiments, each with its own draws:
  {diffuse.median():.4g} (Fig. 5's diffuse case, {len(diffuse)} draws), {by_beta.iloc[0]:.4g} (the β sweep,
  {beta_draws} draws) and {by_n.iloc[0]:.4g} (the n sweep, {n_draws} draws). They differ by sampling alone:
  κ spans more than a decade between the 5 % and 95 % quantiles there.
- **Against n** (diffuse): the median κ grows from {by_n.iloc[0]:.4g} (n = {by_n.index[0]}) to {by_n.iloc[-1]:.4g}
  (n = {by_n.index[-1]}), slope {slope(by_n.index.to_numpy(float), by_n.to_numpy()):.2f} on log-log axes: longer
  sequences make diffuse attention worse conditioned. The proposition's τ/Δ does not explain this growth
  (Δ, the largest row range, grows slowly with n, so τ/Δ falls); the estimate below does.
- **What sets the diffuse κ** (a first-order estimate, not a bound): for small logits A ≈ (11ᵀ + MP)/n with
  P = I − 11ᵀ/n, so σ_min(A) ≈ α σ_min(Z on 1⊥)/n ≈ α/(2n^(3/2)) (a Gaussian n × (n−1) matrix has
  σ_min ≈ 1/(2√n)) while σ_max(A) ≈ 1: κ ≈ 2n^(3/2)/α = {2 * 10 ** 1.5 / 0.1:.0f} at n = 10, α = 0.1. The
  dotted line in the right panel; the measured slope is {slope(by_n.index.to_numpy(float), by_n.to_numpy()):.2f}
  against the estimate's 1.5, and the paper's 730.1 sits next to it.""")
    convention = [n for n in r.notes(verify) if n.startswith("convention:")]
    if convention:
        report.text("- **Eq. 11's variance instead** (`jacond verify prop1`'s note, on draws of its own): "
                    + convention[0].removeprefix("convention: "))
    r.finish(report)
