"""Figures of `jacond recipe always-skip` ("Always Skip Attention", ICCV 2025) from its training runs.

The paper reads conditioning off the token matrices each sub-block *outputs*: the self-attention
block's output is X + SA(LN₁X) when the block keeps its skip and SA(LN₁X) when it does not, and the
same for the FFN block. `sub_block_kappa` picks, per run, the matrix the network actually passes on
(SAB_out or SA_out, FFN_block_out or FFN_out of the run's conditioning.csv; docs/design.md §7a) and
summarises ln κ (natural log, as the paper's tables) per step as the median over probe images and
layers, the lower median (of an even count, the smaller middle value). A singular report (σ_min
under the fp64 noise floor: κ = ∞ in fp64) enters that median as +∞, so a step where more than half
the reports are singular has ln κ = inf, never ln κ_lo as if it were a value; the figures draw such
a step hollow, at the same median with singular reports at their lower bound κ_lo.

    skip_ablation(runs, out_dir)   final test accuracy per skip mode (mean and each seed), one group
                                   per (init, optimizer) and per ConvMixer control; and ln κ of the
                                   SAB and FFN outputs over training, one line per skip mode (the
                                   lower median over seeds, each seed a thin line)
    eps_ablation(table, out_dir)   Token Graying: test accuracy, ln κ_in (at init too, on request)
                                   and ln κ_out against ε for SVD-TG and DCT-TG (mean over seeds,
                                   each seed a dot), the ungrayed seeds' spread as a band
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import PlotError, plotted_kappa, read_csv, require_columns, save
from .training import run_config

SKIP_COLOURS = {"full": "#1f77b4", "no-ffn-skip": "#2ca02c", "no-sab-skip": "#d62728", "none": "#7f7f7f"}
SKIP_LABELS = {"full": "full", "no-ffn-skip": "w/o FFN skip", "no-sab-skip": "w/o SAB skip", "none": "no skips"}
GRAYING_COLOURS = {"svd": "#9467bd", "dct": "#ff7f0e"}
# "Always Skip Attention" ε ablation (ViT-B, ImageNet, SVD-TG): ε → ln κ_in, ln κ_out.
PAPER_EPS = {1.0: {"ln_kappa_in": 6.72, "ln_kappa_out": 6.74}, 0.9: {"ln_kappa_in": 6.64, "ln_kappa_out": 6.66},
             0.7: {"ln_kappa_in": 6.15, "ln_kappa_out": 6.17}, 0.6: {"ln_kappa_in": 5.73, "ln_kappa_out": 5.71},
             0.5: {"ln_kappa_in": 5.29, "ln_kappa_out": 5.25}}


def outputs_passed_on(skip):
    """(the SAB's output matrix, the FFN block's output matrix) as the network computes them."""
    sab = "SAB_out" if skip in ("full", "no-ffn-skip", "rezero") else "SA_out"
    ffn = "FFN_block_out" if skip in ("full", "no-sab-skip", "rezero") else "FFN_out"
    return sab, ffn


def conditioning(directory):
    """The run's conditioning.csv with ln_kappa (singular matrices at κ_lo: what a figure can draw),
    ln_kappa_or_inf (singular matrices at +∞: what a median may take) and `singular` columns."""
    path = os.path.join(directory, "conditioning.csv")
    cond = read_csv(path)
    require_columns(cond, path, ["step", "probe", "layer", "matrix", "kappa", "kappa_lo"])
    singular = cond["status"] == "singular" if "status" in cond.columns else pd.Series(False, index=cond.index)
    ln_kappa = np.log(plotted_kappa(cond))
    return cond.assign(ln_kappa=ln_kappa, ln_kappa_or_inf=np.where(singular, np.inf, ln_kappa), singular=singular)


def sub_block_kappa(directory, layer=None):
    """Per tracked step: ln κ of the SAB's and the FFN block's outputs (columns sab, ffn), the
    median over probe images and layers (or at one `layer`), of the first block's input tokens
    (x_in, layer 0) and of the last block's output (out). Medians are lower medians and a singular
    report counts as κ = ∞, so a median is inf when more than half the reports are singular (a tie
    shows the finite half's largest). sab_singular, ffn_singular: the share
    of singular reports (σ_min under the fp64 noise floor, a rank collapse); sab_drawn, ffn_drawn:
    the medians with singular reports at their κ_lo, the finite value a figure draws."""
    cond = conditioning(directory)
    skip = run_config(directory).get("model", {}).get("skip", "full")
    sab, ffn = outputs_passed_on(skip)
    last = cond["layer"].max()
    pick = cond if layer is None else cond[cond["layer"] == layer]
    def per_step(rows, column="ln_kappa_or_inf"):
        return rows.groupby("step")[column].apply(lower_median)
    columns = {
        "sab_singular": pick[pick["matrix"] == sab].groupby("step")["singular"].mean(),
        "ffn_singular": pick[pick["matrix"] == ffn].groupby("step")["singular"].mean(),
        "sab": per_step(pick[pick["matrix"] == sab]),
        "ffn": per_step(pick[pick["matrix"] == ffn]),
        "sab_drawn": per_step(pick[pick["matrix"] == sab], "ln_kappa"),
        "ffn_drawn": per_step(pick[pick["matrix"] == ffn], "ln_kappa"),
        "x_in": per_step(cond[(cond["matrix"] == "X_in") & (cond["layer"] == 0)]),
        "out": per_step(cond[(cond["matrix"] == ffn) & (cond["layer"] == last)]),
    }
    table = pd.DataFrame(columns)
    if table.empty or table[["sab", "ffn"]].isna().all().all():
        raise PlotError(f"{directory}/conditioning.csv: no {sab}/{ffn} rows (was the run tracked with "
                        f"--track-matrices {sab},{ffn}?)")
    return table


def lower_median(values):
    """The ⌈m/2⌉-th smallest of m values: finite while at most half of them are +∞ (pandas' median
    of an even count averages the two middle values, ∞ as soon as half are)."""
    v = np.sort(np.asarray(values, dtype=float))
    return v[(len(v) - 1) // 2] if len(v) else np.nan


def median_over_seeds(tables, column):
    """Per step, the lower median of `column` over the seeds' sub_block_kappa tables (a step a seed did
    not track left out): with the `sab`/`ffn` columns +∞ when more than half the seeds' medians are.
    Of a `*_drawn` column (singular reports at κ_lo ≤ κ = ∞) it is a lower bound on that median, since
    order statistics do not rise when values are lowered: where the median is +∞ the figure draws it
    hollow at that bound, which need not be any one seed's value."""
    per_seed = pd.concat([t[column] for t in tables], axis=1)
    return per_seed.apply(lambda row: lower_median(row.dropna()), axis=1)


def final_accuracy(directory):
    """Test accuracy (%) at the run's last evaluation."""
    path = os.path.join(directory, "eval.csv")
    ev = read_csv(path)
    require_columns(ev, path, ["step", "test_acc"])
    return 100 * float(ev.sort_values("step")["test_acc"].iloc[-1])


def skip_ablation(runs, out_dir, formats=("png",), command="", controls=None, seeds=None):
    """`runs`: {(skip, init, optimizer): ViT run directory}, seed 0; `controls`: {(skip, "ConvMixer",
    optimizer): run directory} of the CNN control, drawn as more groups of accuracy dots; `seeds`:
    {(skip, init, optimizer): [run directories of the other seeds]}. Two figures:
    skip_ablation_accuracy (per skip mode the mean final accuracy over the seeds run, each seed a small
    dot and their range a bar) and skip_ablation_kappa (ln κ of the SAB and FFN outputs over training,
    one column per (init, optimizer): the lower median over the seeds run, each seed a thin line)."""
    groups = sorted({(init, opt) for _, init, opt in runs}, key=lambda g: (g[1], g[0]))
    skips = [s for s in SKIP_LABELS if any(k[0] == s for k in runs)]
    bar_groups = groups + sorted({(arch, opt) for _, arch, opt in (controls or {})}, key=lambda g: g[1])
    accuracy = {key: [final_accuracy(d) for d in [directory, *(seeds or {}).get(key, [])]]
                for key, directory in {**runs, **(controls or {})}.items()}
    every = [a for accs in accuracy.values() for a in accs]
    fig, ax = plt.subplots(figsize=(8.5 + 1.2 * (len(bar_groups) - len(groups)), 4.2))
    width = 0.8 / max(1, len(skips))
    for i, skip in enumerate(skips):
        x = np.arange(len(bar_groups)) + (i - (len(skips) - 1) / 2) * width
        per_seed = [accuracy.get((skip, init, opt), []) for init, opt in bar_groups]
        means = [np.mean(accs) if accs else np.nan for accs in per_seed]
        # A dot plot, not bars: the differences are a few points, and a dot claims no zero baseline.
        ax.plot(x, means, "o", ms=8, color=SKIP_COLOURS[skip], label=SKIP_LABELS[skip])
        for xi, accs, mean in zip(x, per_seed, means):
            if len(accs) > 1:
                ax.vlines(xi, min(accs), max(accs), color=SKIP_COLOURS[skip], lw=1.2, alpha=0.7)
                ax.plot([xi] * len(accs), accs, "o", ms=3, color="black", alpha=0.6)
            if np.isfinite(mean):
                top = max(accs)
                ax.annotate(f"{mean:.1f}", (xi, top), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    ax.set_xticks(np.arange(len(bar_groups)), [f"{init}, {opt}" for init, opt in bar_groups], fontsize=8)
    ax.set_xlabel("ViT init, optimizer" + ("; the ConvMixer control (one skip per block: full or none)" if controls else ""))
    seed_counts = sorted({len(accs) for accs in accuracy.values()})
    ax.set_ylabel("final test accuracy (%)" + (f"\nmean over {' or '.join(map(str, seed_counts))} seeds (small dots: each)"
                                               if seed_counts != [1] else ""))
    ax.set_ylim(np.floor(min(every) / 5) * 5 - 2, min(100, np.ceil(max(every) / 5) * 5 + 2))
    for boundary in np.arange(len(bar_groups) - 1) + 0.5:
        ax.axvline(boundary, color="#dddddd", lw=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=len(skips), fontsize=8, loc="lower right")  # the ViT groups reach lowest on the left
    ax.set_title("Skip ablation on Fashion-MNIST (paper, ViT-Tiny CIFAR-10: full 92, w/o FFN skip 90, w/o SAB skip 70;"
                 " ConvMixer ±0.2)", fontsize=9)
    fig.text(0.005, 0.005, command, fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths = save(fig, out_dir, "skip_ablation_accuracy", formats)

    fig, axes = plt.subplots(2, len(groups), figsize=(3.4 * len(groups), 6.0), sharex=True, sharey="row", squeeze=False)
    counts = set()
    for j, (init, opt) in enumerate(groups):
        for skip in skips:
            key = (skip, init, opt)
            if key not in runs:
                continue
            tables = [sub_block_kappa(d) for d in [runs[key], *(seeds or {}).get(key, [])]]
            counts.add(len(tables))
            for row, column in enumerate(["sab", "ffn"]):
                ax, colour = axes[row][j], SKIP_COLOURS[skip]
                if len(tables) > 1:
                    for t in tables:  # each seed, thin
                        ax.plot(t.index, t[f"{column}_drawn"], color=colour, lw=0.6, alpha=0.35)
                median, drawn = median_over_seeds(tables, column), median_over_seeds(tables, f"{column}_drawn")
                ax.plot(drawn.index, drawn, color=colour, label=SKIP_LABELS[skip])
                singular = ~np.isfinite(median)  # more than half the seeds' medians singular: hollow, at κ_lo
                ax.plot(drawn.index[~singular], drawn[~singular], ".", color=colour)
                ax.plot(drawn.index[singular], drawn[singular], "o", mfc="none", ms=5, color=colour)
        axes[0][j].set_title(f"{init}, {opt}", fontsize=9)
        axes[1][j].set_xlabel("training step")
    for row, what in enumerate(["SAB output", "FFN block output"]):
        axes[row][0].set_ylabel(f"ln κ({what})\n(median over probes, layers)")
        for ax in axes[row]:
            for level in (3, 6):  # the paper's e³ (with the SAB skip) and e⁶ (without)
                ax.axhline(level, color="black", lw=0.6, ls=":", label="paper: e³, e⁶" if level == 3 else None)
    axes[0][0].legend(fontsize=7)
    over_seeds = (f", then over {' or '.join(map(str, sorted(counts)))} seeds (thin: each seed)"
                  if counts - {1} else "")
    fig.suptitle(f"κ of the token matrices the sub-blocks pass on (lower median over probes and layers{over_seeds})\n"
                 "hollow: more than half the reports are singular in fp64 (a rank collapse, κ = ∞),\ndrawn at the median "
                 "with κ_lo, their lower bound, for the singular ones", fontsize=9)
    fig.text(0.005, 0.005, command, fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.03, 1, 0.93))
    return paths + save(fig, out_dir, "skip_ablation_kappa", formats)


def eps_ablation(table, out_dir, formats=("png",), command="", name="eps_ablation", at_init=False, title=None,
                 paper=True):
    """`table`: one row per run with graying (none | svd | dct), eps, seed, accuracy, ln_kappa_in,
    ln_kappa_out; the graying == none rows (ε = 1, several seeds) give the band. Each graying's line
    joins, at each ε, the accuracy's mean over the seeds run and ln κ's lower median (ε = 1: over the
    ungrayed seeds), each seed a small dot where an ε has several; an ε with one seed is drawn hollow.
    at_init: a panel of ln_kappa_in_init (before the first step) too; paper: the paper's ViT-B ln κ
    drawn dashed (off where they would squash a smaller model's scale); saved as `name`, `title` first
    in the suptitle."""
    base = table[table["graying"] == "none"]
    panels = [("accuracy", "final test accuracy (%)"),
              *([("ln_kappa_in_init", "ln κ_in before the first step")] if at_init else []),
              ("ln_kappa_in", "ln κ_in (first block's input tokens)"), ("ln_kappa_out", "ln κ_out (last block's output tokens)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.8))
    for ax, (column, label) in zip(axes, panels):
        if len(base):
            ax.axhspan(base[column].min(), base[column].max(), color="#cccccc", alpha=0.6,
                       label=f"no graying, {len(base)} seeds (min-max)")
        # Accuracy: the mean over seeds; ln κ: the lower median (a seed's median may be +∞, singular).
        centre = "mean" if column == "accuracy" else lower_median
        if len(base) > 1:
            ax.plot(base["eps"], base[column], "o", ms=2.5, color="#555555", alpha=0.7)
        for graying, g in table[table["graying"] != "none"].groupby("graying"):
            colour = GRAYING_COLOURS.get(graying, "black")
            by_eps = pd.concat([g, base]).groupby("eps")[column]
            centres, counts = by_eps.agg(centre), by_eps.count()
            several = counts > 1  # an ε run at one seed only is hollow: the line joins different seed sets
            ax.plot(centres.index, centres.to_numpy(), color=colour,
                    label=f"{graying}-TG ({'mean' if centre == 'mean' else 'median'} over seeds"
                          + ("; hollow: one seed)" if several.any() and not several.all() else ")"))
            ax.plot(centres.index[several], centres[several], "o", color=colour)
            ax.plot(centres.index[~several], centres[~several], "o", mfc="white", color=colour)
            seeded = g[g.groupby("eps")["seed"].transform("count") > 1]
            ax.plot(seeded["eps"], seeded[column], "o", ms=2.5, color=colour, alpha=0.6)
        if paper and column in PAPER_EPS[1.0]:  # the paper's ViT-B values after training (its accuracies: ImageNet's)
            eps = sorted(PAPER_EPS)
            ax.plot(eps, [PAPER_EPS[e][column] for e in eps], ls="--", marker="x", color="black",
                    label="paper, ViT-B ImageNet, SVD-TG")
            ax.legend(fontsize=7)
        ax.set_xlabel("ε (Token Graying exponent)")
        ax.set_ylabel(label)
        ax.invert_xaxis()
    axes[0].legend(fontsize=8)
    fig.suptitle((title or "Token Graying ε ablation") + " (paper, ViT-B ImageNet SVD-TG: acc 81.0 → 81.4 at "
                 "ε 0.6–0.7; ln κ_in 6.72 → 5.29 at ε 0.5)", fontsize=9)
    fig.text(0.005, 0.005, command, fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    return save(fig, out_dir, name, formats)
