"""`jacond sweep` (sweep.csv + run.json): log10 κ over the α × β grid of the `ours` init.

One panel per matrix (K_sa, K_sab) and per c (rows): the median over seeds of log10 κ. A cell
with a singular seed (κ only bounded below, by κ_lo) is grey and labelled, outside the colour scale
(the panel title counts the singular rows). Skipless K_sab is
singular by construction (LayerNorm's nullspace); when the sweep reports it on the LayerNorm
complement, that is what is drawn. The paper's choices (α = 2, β = 0.6 and α = 1.8, β = 1, both at
c = 3) are marked where the grid covers them.

When the sweep ran matrix-free (`--method lanczos`, the route at ViT sizes) its rows are
brackets, not points, and a second figure (sweep_brackets) draws them: per matrix and c, κ against β
with one series per α, a marker at κ_lo and a bar up to κ_hi; an arrow where κ_hi is unbounded
(σ_min not yet bounded away from 0 within the budget: only κ ≥ κ_lo is known).
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import caption, plotted_kappa, read_csv, require_columns, save

COLUMNS = ["alpha", "beta", "c", "seed", "matrix", "space", "status", "kappa", "kappa_lo"]
MATRICES = ["K_sa", "K_sab"]
PAPER_CHOICES = [(2.0, 0.6, 3.0, "α 2, β 0.6"), (1.8, 1.0, 3.0, "α 1.8, β 1")]


def panel(ax, sub, matrix, c):
    space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
    sub = sub[sub["space"] == space].assign(log_kappa=lambda d: np.log10(plotted_kappa(d)))
    grid = sub.groupby(["beta", "alpha"])["log_kappa"].median().unstack("alpha").sort_index().sort_index(axis=1)
    singular_cells = (sub.assign(s=sub["status"] == "singular").groupby(["beta", "alpha"])["s"].any()
                      .unstack("alpha").reindex_like(grid).fillna(False).to_numpy(dtype=bool))
    # The colour scale spans the cells with a κ; a cell with a singular seed is grey (above the
    # scale: κ there is only bounded below) and labelled, so one singular corner does not flatten
    # the rest of the map.
    values = grid.to_numpy()
    regular = values[~singular_cells & np.isfinite(values)]
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_over("lightgrey")
    top = regular.max() if regular.size else 1.0
    shown = np.where(singular_cells, top + 1.0, values)  # above vmax: the colormap's "over" grey
    mesh = ax.pcolormesh(grid.columns.to_numpy(), grid.index.to_numpy(), shown, shading="nearest", cmap=cmap,
                         vmin=regular.min() if regular.size else 0.0, vmax=top)
    for (bi, ai) in zip(*np.nonzero(singular_cells)):
        ax.text(grid.columns[ai], grid.index[bi], "sing.", ha="center", va="center", fontsize=6, color="black")
    for a, b, cc, label in PAPER_CHOICES:
        if cc == c and grid.columns.min() <= a <= grid.columns.max() and grid.index.min() <= b <= grid.index.max():
            ax.plot(a, b, marker="*", ms=12, mec="white", mfc="red", ls="none", label=f"paper: {label}")
    singular = int((sub["status"] == "singular").sum())
    where = "" if space == "full" else " on LN⊥"
    ax.set_title(f"κ({matrix}){where}, c = {c:g}" + (f"  ({singular} singular rows at κ_lo)" if singular else ""), fontsize=9)
    ax.set_xlabel("α (weight of the random Z)")
    ax.set_ylabel("β (weight of the identity)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    return mesh


def plot(directory, formats):
    path = f"{directory}/sweep.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    matrices = [m for m in MATRICES if (df["matrix"] == m).any()]
    cs = sorted(df["c"].unique())
    fig, axes = plt.subplots(len(cs), len(matrices), figsize=(5.6 * len(matrices), 4.2 * len(cs) + 0.6), squeeze=False)
    for i, c in enumerate(cs):
        for j, matrix in enumerate(matrices):
            sub = df[(df["c"] == c) & (df["matrix"] == matrix)]
            mesh = panel(axes[i][j], sub, matrix, c)
            fig.colorbar(mesh, ax=axes[i][j], extend="max", label="log10 κ (median over seeds; grey: singular)")
    first = df.iloc[0]
    fig.suptitle(f"jacond sweep, {first.get('init', 'ours')} init: n {first['n']}, d {first['d']}, heads {first['heads']}, "
                 f"skip {first['skip']}, {df['seed'].nunique()} seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    paths = save(fig, directory, "sweep_kappa", formats)
    if df["status"].isin(["bracket", "not-converged"]).any():
        paths += brackets(directory, df, matrices, cs, formats)
    return paths


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
            ax.legend(fontsize=7, loc="best")
    first = df.iloc[0]
    fig.suptitle(f"matrix-free brackets: n {first['n']}, d {first['d']}, heads {first['heads']}, skip {first['skip']}",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "sweep_brackets", formats)
