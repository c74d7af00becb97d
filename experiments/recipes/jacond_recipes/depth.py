"""depth: Eq. 8 vs Eq. 9 (κ and rank of the layer products against depth) and Eq. 6 with its ρ, τ."""

import numpy as np
import pandas as pd

NAME = "depth"
SUMMARY = "Eq. 8 vs Eq. 9: kappa and numerical rank of the Jacobian products against depth; Eq. 6 with rho, tau"


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
    deepest["kappa on LN1 complement"] = np.where(np.isfinite(deepest["kappa_ln1c"]), deepest["kappa_ln1c"].map("{:.4g}".format),
                                                  "≥ " + deepest["kappa_ln1c_lo"].map("{:.3g}".format))
    first = products.iloc[0]

    report = r.start_report("Depth: why the skip keeps a deep ViT's Jacobian well conditioned (Eqs. 6, 8, 9)")
    report.text(f"""
**The claim** (*Cutting the Skip*, §4.2–4.3). With skips, the input-output Jacobian of L blocks is
∏(K̂_i + I)(K_i + I) (Eq. 8), where the identity is meant to keep every factor away from singular (the
findings below say for which inits it does). Without them it is
∏ K̂_i K_i (Eq. 9): the condition numbers multiply and the rank can only fall. Eq. 6 bounds κ of a
Jacobian with column blocks J = [J_1 … J_p] by the blocks' κ and their coherence (ρ, τ).
jacond evaluates both products exactly (dense fp64, n = {first['n']}, d = {first['d']}, {first['heads']} heads,
hidden {first['hidden']}, depth 1–{products['depth'].max()}) for the `timm`, `mimetic` and `ours` inits, with
κ on the complement of the first LayerNorm's structural nullspace (skipless products are exactly singular
on the whole space: LayerNorm removes one direction per token).""")
    report.section("Verdict")
    report.table(pd.concat([r.checks_table(r.verify_json(eq89)), r.checks_table(r.verify_json(eq6))]))
    report.section("Figure")
    for png in figures:
        r.add_figure(report, png, "kappa and rank against depth, skip vs skipless")
    report.section(f"At depth {products['depth'].max()}")
    report.table(deepest[["init", "equation", "kappa on LN1 complement", "rank / nd", "kappa_J0"]])
    report.text(skip_finding(deepest, products["depth"].max()))
    report.section("Eq. 6: κ(J) against the bound from its blocks")
    report.table(cases[["init", "skip", "regime", "rows", "p", "kappa_J", "max_kappa_blocks", "rho", "tau", "premise",
                        "bound_tight", "bound_paper"]])
    report.section("Findings (as `jacond verify eq89` and `eq6` print them)")
    for note in r.notes(r.verify_json(eq89)) + r.notes(r.verify_json(eq6)):
        report.text(f"> {note}")
    r.finish(report)
