"""`jacond sweep` (sweep.csv + run.json): log10 κ over the α × β grid of the `ours` init.

One panel per matrix (K_sa, K_sab) and per c (rows): the median over seeds of log10 κ (with one
seed per cell, that seed's log10 κ, and the colour bar says so: colour_label). A cell
with a singular seed (κ only bounded below, by κ_lo) is grey and labelled, outside the colour scale
(the panel title counts the singular rows). A cell with a seed whose matrix-free bracket did not
converge (status not-converged: σ_min not bounded away from 0, so only κ ≥ κ_lo is known) is
coloured at the median with κ_lo for that seed, hatched and marked "≥": the median is monotone in
each entry, so it is a lower bound of the median κ, never an estimate of it. Skipless K_sab is
singular by construction (LayerNorm's nullspace); when the sweep reports it on the LayerNorm
complement, that is what is drawn. The paper's choices (α = 2, β = 0.6 and α = 1.8, β = 1, both at
c = 3) are marked where the grid covers them.

A sweep of an init without knobs (`timm`, `mimetic`: the alpha, beta, c columns are nan) has
only seeds: per_seed draws κ per seed and matrix instead (sweep_seeds).

When the sweep ran matrix-free (`--method lanczos`, the route at ViT sizes) its rows are
brackets, not points, and a second figure (sweep_brackets) draws them: per matrix and c, κ against β
with one series per α, a marker at κ_lo and a bar up to κ_hi; an arrow where κ_hi is unbounded
(σ_min not yet bounded away from 0 within the budget: only κ ≥ κ_lo is known).
"""

import matplotlib.patheffects as patheffects
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from .common import caption, cell_edges, plotted_kappa, read_csv, require_columns, save

COLUMNS = ["alpha", "beta", "c", "seed", "matrix", "space", "status", "kappa", "kappa_lo"]
MATRICES = ["K_sa", "K_sab"]
PAPER_CHOICES = [(2.0, 0.6, 3.0, "α 2, β 0.6"), (1.8, 1.0, 3.0, "α 1.8, β 1")]


def cell_grid(sub):
    """The (β × α) grid of one panel's rows (one matrix, one c, one space): the median over seeds of
    log10 κ, and each cell's kind, "singular" (a seed singular: grey, off the scale), "lower" (a seed
    not converged: its κ_lo enters the median, which is then a lower bound) or "value"."""
    status = sub["status"]
    cells = sub.assign(log_kappa=np.log10(plotted_kappa(sub)), singular=status == "singular",
                       lower=status == "not-converged")
    by_cell = cells.groupby(["beta", "alpha"])
    grid = by_cell["log_kappa"].median().unstack("alpha").sort_index().sort_index(axis=1)
    def flag(column):
        return by_cell[column].any().unstack("alpha").reindex_like(grid).eq(True).to_numpy()
    kinds = np.where(flag("singular"), "singular", np.where(flag("lower"), "lower", "value"))
    return grid, kinds


def mark_cells(ax, alphas, betas, kinds):
    """"sing." on singular cells; a hatch and "≥" on lower-bound cells (in the lower left corner:
    a cell's centre may carry a paper's star, the panel's top right the legend)."""
    a_edges, b_edges = cell_edges(alphas), cell_edges(betas)
    for (bi, ai) in zip(*np.nonzero(kinds == "singular")):
        ax.text(alphas[ai], betas[bi], "sing.", ha="center", va="center", fontsize=6, color="black")
    for (bi, ai) in zip(*np.nonzero(kinds == "lower")):
        width, height = a_edges[ai + 1] - a_edges[ai], b_edges[bi + 1] - b_edges[bi]
        ax.add_patch(plt.Rectangle((a_edges[ai], b_edges[bi]), width, height, fill=False, hatch="///",
                                   edgecolor="white", linewidth=0, alpha=0.6))
        ax.text(a_edges[ai] + 0.15 * width, b_edges[bi] + 0.2 * height, "≥", ha="center", va="center", fontsize=12,
                color="white", path_effects=[patheffects.withStroke(linewidth=2, foreground="black")])


def drawn_rows(sub):
    """The space a panel draws (the LayerNorm complement where the sweep reports it) and its rows."""
    space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
    return space, sub[sub["space"] == space]


def seeds_per_cell(sub):
    """The distinct numbers of seeds in a panel's cells (sorted): what a cell's colour is, one κ or
    a median over that many."""
    return sorted(int(n) for n in sub.groupby(["beta", "alpha"])["seed"].nunique().unique())


def panel(ax, sub, matrix, c):
    space, sub = drawn_rows(sub)
    grid, kinds = cell_grid(sub)
    # The colour scale spans the cells with a κ or a lower bound of it; a cell with a singular seed
    # is grey (above the scale: κ there is only bounded below) and labelled, so one singular corner
    # does not flatten the rest of the map.
    values = grid.to_numpy()
    regular = values[(kinds != "singular") & np.isfinite(values)]
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_over("lightgrey")
    top = regular.max() if regular.size else 1.0
    shown = np.where(kinds == "singular", top + 1.0, values)  # above vmax: the colormap's "over" grey
    alphas, betas = grid.columns.to_numpy(dtype=float), grid.index.to_numpy(dtype=float)
    # Explicit edges ("flat"): with one α or one β "nearest" shading gives the cells no width.
    mesh = ax.pcolormesh(cell_edges(alphas), cell_edges(betas), shown, shading="flat", cmap=cmap,
                         vmin=regular.min() if regular.size else 0.0, vmax=top)
    mark_cells(ax, alphas, betas, kinds)
    for a, b, cc, label in PAPER_CHOICES:
        if cc == c and alphas.min() <= a <= alphas.max() and betas.min() <= b <= betas.max():
            ax.plot(a, b, marker="*", ms=12, mec="white", mfc="red", ls="none", label=f"paper: {label}")
    counts = [f"{k} {what}" for k, what in ((int((sub["status"] == "singular").sum()), "singular"),
                                             (int((sub["status"] == "not-converged").sum()), "not converged"))
              if k]
    where = "" if space == "full" else " on LN⊥"
    ax.set_title(f"κ({matrix}){where}, c = {c:g}" + (f"  ({', '.join(counts)} of {len(sub)} rows: κ_lo)" if counts else ""),
                 fontsize=9)
    ax.set_xlabel("α (weight of the random Z)")
    ax.set_ylabel("β (weight of the identity)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    return mesh, kinds


def cell_is(seeds):
    """What a cell holds for seeds_per_cell: "1 seed" (a single κ: "median" would claim seeds that
    are not there), "median over N seeds", or "median over N–M seeds" where cells differ."""
    if not seeds:
        return "no seeds"
    if seeds == [1]:
        return "1 seed"
    if len(seeds) == 1:
        return f"median over {seeds[0]} seeds"
    return f"median over {seeds[0]}–{seeds[-1]} seeds"


def colour_label(kinds, seeds):
    """The colour bar's label for a panel's cell kinds (cell_grid) and seeds per cell
    (seeds_per_cell): what a cell's colour is and what its marks mean."""
    marks = [text for kind, text in (("lower", "≥ hatched: lower bound"), ("singular", "grey: singular"))
             if (kinds == kind).any()]
    return f"log10 κ ({cell_is(seeds)})" + ("\n" + "; ".join(marks) if marks else "")


def seed_count(n):
    return "1 seed" if n == 1 else f"{n} seeds"


def plot(directory, formats):
    path = f"{directory}/sweep.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    matrices = [m for m in MATRICES if (df["matrix"] == m).any()]
    if df["alpha"].isna().all():  # timm, mimetic: no α, β, c; the grid is the seeds
        return per_seed(directory, df, matrices, formats)
    cs = sorted(df["c"].unique())
    fig, axes = plt.subplots(len(cs), len(matrices), figsize=(5.6 * len(matrices), 4.2 * len(cs) + 0.6), squeeze=False)
    for i, c in enumerate(cs):
        for j, matrix in enumerate(matrices):
            sub = df[(df["c"] == c) & (df["matrix"] == matrix)]
            mesh, kinds = panel(axes[i][j], sub, matrix, c)
            fig.colorbar(mesh, ax=axes[i][j], extend="max" if (kinds == "singular").any() else "neither",
                         label=colour_label(kinds, seeds_per_cell(drawn_rows(sub)[1])))
    first = df.iloc[0]
    fig.suptitle(f"jacond sweep, {first.get('init', 'ours')} init: n {first['n']}, d {first['d']}, heads {first['heads']}, "
                 f"skip {first['skip']}, {seed_count(df['seed'].nunique())}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    paths = save(fig, directory, "sweep_kappa", formats)
    if df["status"].isin(["bracket", "not-converged"]).any():
        paths += brackets(directory, df, matrices, cs, formats)
    return paths


def per_seed(directory, df, matrices, formats):
    """A sweep of an init without knobs (`timm`, `mimetic`: alpha, beta and c are nan): κ per seed,
    one panel per matrix, on a log scale. An exact κ is a dot; a bracket a bar from κ_lo to κ_hi
    (an arrow where κ_hi is unbounded); a singular κ a triangle at κ_lo, its lower bound."""
    fig, axes = plt.subplots(1, len(matrices), figsize=(5.2 * len(matrices), 4.2), squeeze=False)
    for ax, matrix in zip(axes[0], matrices):
        sub = df[df["matrix"] == matrix]
        space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
        sub = sub[sub["space"] == space].sort_values("seed")
        seed, lo = sub["seed"].to_numpy(float), sub["kappa_lo"].to_numpy(float)
        hi = sub["kappa_hi"].to_numpy(float) if "kappa_hi" in sub else sub["kappa"].to_numpy(float)
        exact = (sub["status"] == "exact").to_numpy()
        singular = (sub["status"] == "singular").to_numpy()
        ranged = ~exact & ~singular
        bounded = ranged & np.isfinite(hi)
        if exact.any():
            ax.scatter(seed[exact], sub["kappa"].to_numpy(float)[exact], color="C0", s=22, zorder=3, label="exact")
        if singular.any():
            ax.scatter(seed[singular], lo[singular], color="grey", marker="^", s=30, zorder=3, label="singular (κ ≥ κ_lo)")
        if ranged.any():
            ax.vlines(seed[bounded], lo[bounded], hi[bounded], color="C1", lw=2.5, label="bracket (arrow: κ_hi unbounded)")
        top = np.nanmax(np.where(np.isfinite(hi), hi, lo)) * 10
        for x, y in zip(seed[ranged & ~bounded], lo[ranged & ~bounded]):
            ax.annotate("", xy=(x, top * 0.8), xytext=(x, y), arrowprops=dict(arrowstyle="->", color="C1", lw=1))
        ax.set_yscale("log")
        ax.set_xlabel("seed")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("κ (log scale)")
        where = "" if space == "full" else " on LN⊥"
        ax.set_title(f"κ({matrix}){where} per seed", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    first = df.iloc[0]
    fig.suptitle(f"jacond sweep, {first['init']} init (no α, β, c): n {first['n']}, d {first['d']}, heads {first['heads']}, "
                 f"skip {first['skip']}, {seed_count(df['seed'].nunique())}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "sweep_seeds", formats)


def brackets(directory, df, matrices, cs, formats):
    fig, axes = plt.subplots(len(cs), len(matrices), figsize=(5.8 * len(matrices), 4.2 * len(cs) + 0.6), squeeze=False)
    alphas = sorted(df["alpha"].unique())
    step = np.diff(sorted(df["beta"].unique())).min() if df["beta"].nunique() > 1 else 1.0
    for i, c in enumerate(cs):
        for j, matrix in enumerate(matrices):
            ax = axes[i][j]
            sub = df[(df["c"] == c) & (df["matrix"] == matrix)]
            space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
            sub = sub[sub["space"] == space]
            finite = pd.concat([sub["kappa_lo"], sub["kappa_hi"]]).replace(np.inf, np.nan)
            bottom, top = finite.min() / 2, finite.max() * 10
            for k, alpha in enumerate(alphas):
                g = sub[sub["alpha"] == alpha]
                x = g["beta"].to_numpy(float) + (k - (len(alphas) - 1) / 2) * 0.12 * step
                lo, hi = g["kappa_lo"].to_numpy(float), g["kappa_hi"].to_numpy(float)
                colour = plt.get_cmap("viridis")(k / max(1, len(alphas) - 1))
                ax.scatter(x, lo, color=colour, s=18, zorder=3, label=f"α = {alpha:g}")
                bounded = np.isfinite(hi)
                ax.vlines(x[bounded], lo[bounded], hi[bounded], color=colour, lw=2.5, alpha=0.6)
                for xi, li in zip(x[~bounded], lo[~bounded]):
                    ax.annotate("", xy=(xi, top * 0.8), xytext=(xi, li), arrowprops=dict(arrowstyle="->", color=colour, lw=1))
            ax.set_yscale("log")
            ax.set_ylim(bottom, top)
            ax.set_xlabel("β (weight of the identity)")
            ax.set_ylabel("κ bracket [κ_lo, κ_hi] (log scale)")
            where = "" if space == "full" else " on LN⊥"
            ax.set_title(f"κ({matrix}){where}, c = {c:g}: bars bracket κ, arrows: κ_hi unbounded", fontsize=9)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: arrows reach the top
    first = df.iloc[0]
    fig.suptitle(f"matrix-free brackets: n {first['n']}, d {first['d']}, heads {first['heads']}, skip {first['skip']}",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "sweep_brackets", formats)
