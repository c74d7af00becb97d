"""depth: Eq. 8 vs Eq. 9 (κ and rank of the layer products against depth) and Eq. 6's assumption with
App. A.2.4's ρ, τ."""

import numpy as np
import pandas as pd

NAME = "depth"
SUMMARY = ("Eq. 8 vs Eq. 9: kappa and numerical rank of the Jacobian products against depth; Eq. 6's assumption, "
           "with App. A.2.4's rho, tau")


def kappa_cell(kappa, kappa_lo, fmt="{:.4g}"):
    """κ as a table shows it: the value, or "≥ κ_lo" where the matrix is singular (κ = ∞ in fp64 says
    only that κ is at least κ_lo)."""
    return fmt.format(kappa) if np.isfinite(kappa) else "≥ " + "{:.3g}".format(kappa_lo)


def findings_table(deepest, cases):
    """The paper's statements this page tests, each decided from the data: Eq. 6's assumption over the
    cases (with κ = ∞ for singular matrices, and on the numerical range), and whether the skip keeps κ
    of the Eq. 8 product near 1 at the deepest depth, per init."""
    def counts(column):
        c = cases[column].str.split("(").str[0].value_counts()
        return {k: int(c.get(k, 0)) for k in ("holds", "fails", "vacuous")}
    rows = []
    for column, how in (("eq6", "κ = ∞ for a singular matrix"), ("eq6_eff", "κ_eff = σ₁/σ_rank, on the numerical range")):
        c = counts(column)
        failed = cases[cases[column].str.startswith("fails")]
        rows.append({"statement": f"Eq. 6's assumption κ(J) ≤ max_ℓ κ(J_ℓ) ({how})",
                     "here": f"holds in {c['holds']}, fails in {c['fails']}, vacuous (a block singular, its bound ∞) in "
                             f"{c['vacuous']} of {len(cases)} cases"
                             + (": fails in " + ", ".join(f"{r.init}/{r.skip}/{r.regime}" for r in failed.itertuples())
                                if len(failed) else ""),
                     "holds": "no" if c["fails"] else "untested" if not c["holds"] else
                              f"wherever it says anything ({c['holds']} cases; vacuous in the other {c['vacuous']})"
                              if c["vacuous"] else "yes"})
    eq8 = deepest[deepest["equation"] == "eq8"]
    near = eq8[np.isfinite(eq8["kappa_ln1c"]) & (eq8["kappa_ln1c"] < 2)]["init"].tolist()
    depth = int(deepest["depth"].max())
    rows.append({"statement": f"with skips (Eq. 8) the identity keeps the product well conditioned (κ < 2 on LN1⊥ at depth {depth})",
                 "here": ", ".join(f"`{r.init}` {kappa_cell(r.kappa_ln1c, r.kappa_ln1c_lo)}" for r in eq8.itertuples()),
                 "holds": f"for {len(near)} of {len(eq8)} inits" + (": " + ", ".join(near) if near else "")})
    # LayerNorm removes one direction per token, so every product has rank ≤ nd − n on the whole space by
    # construction; what Eq. 9 adds is rank lost beyond that, i.e. singular on the LN1 complement.
    eq9 = deepest[deepest["equation"] == "eq9"]
    lost = ~np.isfinite(eq9["kappa_ln1c"])
    rows.append({"statement": f"without skips (Eq. 9) the product loses rank beyond LayerNorm's (depth {depth})",
                 "here": ", ".join(f"`{r.init}` rank {r.rank} of {r.rows} (LayerNorm alone: {r.rows - r.n})"
                                   for r in eq9.itertuples())
                         + f"; singular on LN1⊥ in {int(lost.sum())} of {len(eq9)}",
                 "holds": "yes" if lost.all() else f"in {int(lost.sum())} of {len(eq9)} inits"})
    return pd.DataFrame(rows)


def skip_finding(deepest, depth):
    """Which inits the skip keeps near κ = 1 at the deepest depth (Eq. 8 rows), against Eq. 9."""
    with_skip = deepest[deepest["equation"] == "eq8"].set_index("init")
    without = deepest[deepest["equation"] == "eq9"].set_index("init")
    def kappa(row):
        return row["kappa_ln1c"] if np.isfinite(row["kappa_ln1c"]) else np.inf
    near_one = [i for i, row in with_skip.iterrows() if kappa(row) < 2]
    grown = [i for i, row in with_skip.iterrows() if kappa(row) >= 2]
    parts = [f"`{i}` {row['kappa on LN1 complement']}" + ("" if row["rank / nd"] == 1 else f" (rank {row['rank / nd']:.4g} of nd)")
             for i, row in with_skip.iterrows()]
    lows = [float(v) for v in without["kappa_ln1c_lo"]] if len(without) else []
    text = (f"**Finding.** With skips (Eq. 8) at depth {depth}, κ on the LN1 complement is " + ", ".join(parts) + ". ")
    if near_one:
        text += ("The skip keeps it near 1 only for " + ", ".join(f"`{i}`" for i in near_one)
                 + " (whose residual branches are small: see the path sums |c_k| below)")
    if grown:
        text += ("; " if near_one else "") + ", ".join(f"`{i}`" for i in grown) + (" grows" if len(grown) == 1 else " grow") + \
                " with depth even with skips"
    if lows:
        text += f", though far less than without them (Eq. 9: κ ≥ {min(lows):.3g}, singular on the whole space)"
    return text + "."


def run(r):
    eq89, eq6 = r.work("eq89"), r.work("eq6")
    r.run("verify", "eq89", "--threads", r.threads, "--out", eq89)
    r.run("verify", "eq6", "--threads", r.threads, "--out", eq6)
    figures = r.plot(eq89)
    products = r.read_csv(f"{eq89}/eq89_products.csv")
    cases = r.read_csv(f"{eq6}/eq6_cases.csv")
    deepest = products[products["depth"] == products["depth"].max()].copy()
    deepest["rank / nd"] = deepest["rank"] / deepest["rows"]
    deepest["kappa on LN1 complement"] = [kappa_cell(k, lo) for k, lo in zip(deepest["kappa_ln1c"], deepest["kappa_ln1c_lo"])]
    deepest["kappa of dF/dθ⁽⁰⁾"] = [kappa_cell(k, lo) for k, lo in zip(deepest["kappa_J0"], deepest["kappa_J0_lo"])]
    first = products.iloc[0]

    report = r.start_report("Depth: κ of a deep ViT's Jacobian with and without skips (Eqs. 6, 8, 9)")
    report.text(f"""
**The claim** (*Cutting the Skip*, §4.2–4.3). Eq. 8 writes the derivative of the output with respect to
block ℓ's attention parameters with skips as ∏_(i>ℓ)(K̂_i + I)(K_i + I) · (K̂_ℓ + I) · ∂f_SA/∂θ^(ℓ), where the
identity shifts each factor's spectrum away from zero; without skips (Eq. 9) it is ∏ K̂_i K_i · K̂_ℓ ·
∂f_SA/∂θ^(ℓ): the condition numbers multiply and the rank can only fall. Eq. 6 is the paper's simplifying
assumption κ(J) ≤ max_ℓ {{κ(J_ℓ), κ(Ĵ_ℓ)}} for the network Jacobian J = [J_1 … J_p] by parameter blocks, which
the paper says "does not hold universally" and justifies under block incoherence (App. A.2.4: ρ, τ).
jacond evaluates the products of the input Jacobians exactly (the input–output Jacobian of L blocks, the
part of Eqs. 8/9 the skip changes; dense fp64, n = {first['n']}, d = {first['d']}, {first['heads']} heads,
hidden {first['hidden']}, depth 1–{products['depth'].max()}) and the whole of Eq. 8/9 at the first block,
∂F/∂θ⁽⁰⁾, for the `timm`, `mimetic` and `ours` inits, with κ of the products on the complement of the first
LayerNorm's structural nullspace (skipless products are exactly singular on the whole space: LayerNorm
removes one direction per token); and tests Eq. 6 on the parameter Jacobian by blocks.""")
    report.section("What holds here")
    report.table(findings_table(deepest, cases))
    report.section("Numerical self-checks")
    report.text("Theorems and agreements between independent computations: these fail only if jacond is wrong "
                "(N/A: no case met the check's premise).")
    report.table(pd.concat([r.checks_table(r.verify_json(eq89)), r.checks_table(r.verify_json(eq6))]))
    report.text("""
**Paper misprint** (App. A.2.4, Eq. 37). Eq. 37's middle expression, sqrt(((1 + ρ/s_max²)/(1 − ρ/s_min²))·s_max/s_min),
is smaller than its first, sqrt((s_max² + ρ)/(s_min² − ρ)) (s_max = 2, s_min = 1, ρ = 0.1: 1.509 against 2.134), so
its first "≤" is false; the correct middle is (s_max/s_min)·sqrt((1 + ρ/s_max²)/(1 − ρ/s_min²)), which equals the
first. The A.2.4 check above ("≤ paper Eq. 37's last bound") uses the first and last expressions, which are right
(s_max/s_min ≤ τ κ_max). Under the premise ρ < s_min², M̃ᵀM̃ is positive definite, so the check also asks that
J's rank be Σ_k rank(J_k): a case where it is not fails.""")
    report.section("Figure")
    for png in figures:
        r.add_figure(report, png, "kappa and rank against depth, skip vs skipless")
    report.section(f"At depth {products['depth'].max()}")
    report.table(deepest[["init", "equation", "kappa on LN1 complement", "rank / nd", "kappa of dF/dθ⁽⁰⁾"]])
    report.text(skip_finding(deepest, products["depth"].max()))
    report.section("Eq. 6: κ(J) against its blocks' largest κ, with App. A.2.4's ρ, τ")
    report.table(cases[["init", "skip", "regime", "rows", "p", "kappa_J", "max_kappa_blocks", "rho", "tau", "premise",
                        "bound_tight", "bound_paper"]])
    report.section("Findings (as `jacond verify eq89` and `eq6` print them)")
    for note in r.notes(r.verify_json(eq89)) + r.notes(r.verify_json(eq6)):
        report.text(f"> {note}")
    r.finish(report)
