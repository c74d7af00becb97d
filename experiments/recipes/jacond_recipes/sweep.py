"""sweep: κ(K_sa), κ(K_sab) over α × β × c of the `ours` init, dense at a small size and matrix-free
brackets at ViT-S size, and a test of the paper's "not highly sensitive" footnote."""

import numpy as np
import pandas as pd

NAME = "sweep"
SUMMARY = "kappa over alpha x beta x c of the ours init (small, dense; ViT-S, brackets) and the sensitivity claim"

SMALL = ["--alpha", "0:3:0.5", "--beta", "0:2:0.25", "--c", "1:5:2", "--seeds", 3, "--n", 16, "--d", 32, "--heads", 2]
SMALL_QUICK = ["--alpha", "1.5:2.5:0.5", "--beta", "0.1:1.1:0.5", "--c", 3, "--seeds", 1, "--n", 4, "--d", 8, "--heads", 2]
# ViT-S: n = 197 tokens, d = 384, 6 heads; the paper's α = 2 at three β, and α = 1, 3 around it.
VITS = ["--alpha", "1:3:1", "--beta", "0.2:1:0.4", "--c", 3, "--seeds", 1, "--n", 197, "--d", 384, "--heads", 6,
        "--method", "lanczos", "--lanczos-seconds", 20]
VITS_QUICK = ["--alpha", 2, "--beta", "0.2:0.6:0.4", "--c", 3, "--seeds", 1, "--n", 8, "--d", 16, "--heads", 2,
              "--method", "lanczos", "--lanczos-seconds", 1]
RATIO_SENSITIVE = 10.0  # "not highly sensitive": median κ moves less than 10× near the paper's choice


def kappa_rows(df, matrix):
    sub = df[df["matrix"] == matrix]
    space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
    return sub[sub["space"] == space], space


def sensitivity(df, matrix):
    """Median κ over seeds at each grid point near (α, β, c) = (2, 0.6, 3), and across c at (2, 0.6)."""
    sub, space = kappa_rows(df, matrix)
    # A not-converged row knows only κ ≥ κ_lo: it makes its grid point unknown (NaN), never a value.
    known = sub.assign(kappa=sub["kappa"].where(sub["status"] != "not-converged"))
    med = known.groupby(["alpha", "beta", "c"])["kappa"].agg(lambda v: v.median(skipna=False))
    near = med[((med.index.get_level_values("alpha") - 2).__abs__() <= 0.5 + 1e-9) &
               ((med.index.get_level_values("beta") - 0.6).__abs__() <= 0.5 + 1e-9) &
               (med.index.get_level_values("c") == 3)]
    betas = med.index.get_level_values("beta")
    nearest_beta = betas[np.abs(betas - 0.6).argmin()]
    at_choice_c = med[np.isclose(med.index.get_level_values("alpha"), 2) & np.isclose(betas, nearest_beta)]
    row = {"matrix": matrix + ("" if space == "full" else " (LN⊥)"), "points near (2, 0.6, 3)": len(near),
           "min median κ": near.min(skipna=False) if len(near) else np.nan,
           "max median κ": near.max(skipna=False) if len(near) else np.nan,
           "whole grid: min": med.min(), "whole grid: max": med.max()}
    row["ratio near the choice"] = row["max median κ"] / row["min median κ"]
    # The same ratio seed by seed (every grid point has every seed: the same tokens and draws along the
    # grid), its smallest and largest over the seeds: what the sensitivity verdict reads.
    by_seed = known.set_index(["alpha", "beta", "c"])
    by_seed = by_seed[by_seed.index.isin(near.index)].groupby("seed")["kappa"].agg(lambda v: v.max() / v.min())
    row["per-seed ratio near the choice: min"] = by_seed.min(skipna=False) if len(by_seed) else np.nan
    row["per-seed ratio near the choice: max"] = by_seed.max(skipna=False) if len(by_seed) else np.nan
    row["seeds"] = sub["seed"].nunique()
    row[f"ratio across c at (2, {nearest_beta:g})"] = at_choice_c.max() / at_choice_c.min() if len(at_choice_c) > 1 else np.nan
    # Which knob moves κ more: the median, over the other knobs, of max/min along one knob.
    log = np.log10(med.replace(np.inf, np.nan))
    def spread(others):  # max/min over the knob not in `others`, its median over the grid of `others`
        return 10 ** (log.groupby(level=others).agg(lambda v: v.max() - v.min()).median())
    row["typical ratio along β"] = spread(["alpha", "c"])
    row["typical ratio along α"] = spread(["beta", "c"])
    return row


def sensitivity_verdict(row):
    """The footnote's "not highly sensitive", read on κ near the paper's choice seed by seed (max/min of
    each seed's κ over the neighbourhood): not highly sensitive where every seed's ratio is below
    RATIO_SENSITIVE, sensitive where every seed's is at least that, undecided where the seeds disagree."""
    ratio, low, high = row["ratio near the choice"], row["per-seed ratio near the choice: min"], \
        row["per-seed ratio near the choice: max"]
    if not (np.isfinite(ratio) and np.isfinite(low) and np.isfinite(high)):
        return f"- {row['matrix']}: the grid does not resolve the neighbourhood (or a point there is singular or did not converge)."
    seeds = f"{row['seeds']} seeds" if row["seeds"] > 1 else "one seed"
    moves = (f"- {row['matrix']}: within ±0.5 of α = 2, β = 0.6 at c = 3 the median κ over seeds moves {ratio:.3g}× "
             f"({row['min median κ']:.3g} to {row['max median κ']:.3g}), each seed's κ {low:.3g}× to {high:.3g}× "
             f"({seeds}): ")
    if high < RATIO_SENSITIVE:
        return moves + f"**not highly sensitive** (< {RATIO_SENSITIVE:g}× in every seed)."
    if low >= RATIO_SENSITIVE:
        return moves + f"**sensitive** (≥ {RATIO_SENSITIVE:g}× in every seed) at this size."
    return moves + f"undecided: some seeds move ≥ {RATIO_SENSITIVE:g}×, others less."


def run(r):
    small, vits = r.work("small"), r.work("vit-s")
    r.run("sweep", *(SMALL_QUICK if r.quick else SMALL), "--threads", r.threads, "--out", small)
    r.run("sweep", *(VITS_QUICK if r.quick else VITS), "--threads", r.threads, "--out", vits)
    small_figures, vits_figures = r.plot(small), r.plot(vits)
    df, big = r.read_csv(f"{small}/sweep.csv"), r.read_csv(f"{vits}/sweep.csv")
    table = pd.DataFrame([sensitivity(df, m) for m in ("K_sa", "K_sab")])
    first, big_first = df.iloc[0], big.iloc[0]

    report = r.start_report("The α × β × c landscape of the `ours` initialisation")
    report.text(f"""
**The claim** (*Cutting the Skip*, Eq. 11, §6.1 and its footnote 2). The `ours` init sets
W^Q W^Kᵀ = αZ + βI (diagonally dominant logits) and W^V W^O scaled orthogonal with c; the paper uses
α = 2, β = 0.6, c = 3 for ViT-B (α = 1.8, β = 1 elsewhere) and says the hyperparameters are "not highly
sensitive" (of training; this page asks the same of the conditioning at init).
jacond sweeps the grid and reports κ of the bare attention Jacobian K_sa and of the skipless attention
sub-block K_sab (on the LayerNorm complement: on the whole space it is singular by construction), per
seed, with each value's status. Two sizes: n = {first['n']}, d = {first['d']}, {first['heads']} heads
(dense, exact, {df['seed'].nunique()} seeds), and ViT-S, n = {big_first['n']}, d = {big_first['d']},
{big_first['heads']} heads (matrix-free GKL brackets, {'1 s' if r.quick else '20 s'} per matrix, warm-started
along the grid).""")
    report.section(f"Small size, dense: median log10 κ over {df['seed'].nunique()} seeds")
    for png in small_figures:
        r.add_figure(report, png, "log10 kappa over alpha x beta per c", name="sweep_small_" + png.rsplit("/", 1)[-1])
    report.section('"Not highly sensitive"?')
    report.table(table)
    verdicts = [sensitivity_verdict(row) for _, row in table.iterrows()]
    verdicts.append("- The footnote speaks of the trained model's outcome; this page measures κ at init, so it "
                    "tests how sensitive the *conditioning* is, not the footnote itself.")
    shown_rows = pd.concat([kappa_rows(df, m)[0] for m in ("K_sa", "K_sab")])  # the table's rows (K_sab on LN⊥)
    singular_points = sorted({(a, b) for a, b, k in zip(shown_rows["alpha"], shown_rows["beta"], shown_rows["kappa"])
                              if not np.isfinite(k)})
    report.text("\n".join(verdicts) + "\n\nOver the whole grid κ spans "
                + "; ".join(f"{row['matrix']} {row['whole grid: min']:.3g} to {row['whole grid: max']:.3g}" for _, row in table.iterrows())
                + ("" if not singular_points else
                   " (inf: singular at (α, β) = " + ", ".join(f"({a:g}, {b:g})" for a, b in singular_points)
                   + (", where W^Q W^Kᵀ = 0 and every softmax row is uniform" if singular_points == [(0.0, 0.0)] else "") + ")")
                + ". Which knob matters more (the median over the other knobs of max/min κ along one knob): "
                + "; ".join(f"{row['matrix']}: β {row['typical ratio along β']:.3g}×, α {row['typical ratio along α']:.3g}×"
                            for _, row in table.iterrows()) + ".")
    across_c = table[[c for c in table.columns if c.startswith("ratio across c")]].to_numpy(float)
    if np.isfinite(across_c).all() and np.allclose(across_c, 1, atol=1e-6):
        report.text("**c changes no κ here**, exactly: c scales W^V W^O, and K_sa = B_sa + E_sa and the skipless K_sab "
                    "are linear in W^V W^O, so c scales them and κ (a ratio) does not see it. c matters where a "
                    "skip adds the identity (K_sab + I), i.e. in the residual network, not in these matrices.")
    report.section("ViT-S size, matrix-free: brackets")
    report.text("At ViT-S size a dense κ is a 46 GB matrix; the matrix-free route returns a bracket [κ_lo, κ_hi] "
                "that always contains κ (docs/design.md, the numerical contract). An arrow is a bracket whose upper "
                "end is still unbounded after the budget: only κ ≥ κ_lo is claimed.")
    # K_sa on the whole space; skipless K_sab on the LayerNorm complement (whole space: singular by construction).
    shown = big[((big["matrix"] == "K_sa") & (big["space"] == "full")) |
                ((big["matrix"] == "K_sab") & (big["space"] != "full"))][["alpha", "beta", "matrix", "space", "status",
                                                                         "kappa_lo", "kappa_hi", "products", "seconds"]]
    open_rows = int((shown["status"] == "not-converged").sum())
    if open_rows:
        report.text(f"{open_rows} of these {len(shown)} rows stopped at the budget with σ_min not bounded away from 0 "
                    "(status not-converged). In the heatmap their cells are hatched and marked ≥: the colour is the "
                    "lower bound κ_lo, not κ. Where the dense truth is known (reports/scale, sections 3 and 4) such "
                    "lower bounds of the bare `ours` K_sa sit orders of magnitude below κ.")
    for png in vits_figures:
        r.add_figure(report, png, "ViT-S kappa brackets", name="sweep_vits_" + png.rsplit("/", 1)[-1])
    report.table(shown)
    r.finish(report)
